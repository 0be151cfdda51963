"""The Tasks list follows the tasks (issue 35, part 4): the page subscribes to the pulse and fetches its list again
from /panels/tasks with its own filters, sort and page; these check the server's side of that."""

from __future__ import annotations

import html
from datetime import timedelta

from api_helpers import unique
from test_ui_task_list import flash, put, rows
from ui_helpers import SignIn

from orchestrator.store import Store
from sdk import TaskStatus
from sdk.wire.identity import Role


async def test_the_list_page_follows_its_panel_and_the_panel_has_the_pages_filters_and_sort(
    sign_in: SignIn, store: Store
) -> None:
    p = unique("live")
    put(store, f"{p}-a", tokens=10, ago=timedelta(minutes=3))
    viewer = await sign_in(Role.viewer)
    page = await viewer.get(f"/tasks?q={p}&sort=tokens&dir=desc")
    assert f'data-panel="/panels/tasks?q={p}&amp;sort=tokens&amp;dir=desc"' in page.text
    assert 'id="page-live" data-live="off"' in page.text  # live.js turns it on when the pulse answers

    # A task changes and another arrives: the panel, as the page fetches it, has them in the page's order.
    state = put(store, f"{p}-b", tokens=900, ago=timedelta(minutes=1))
    store.tasks.save_state(state.model_copy(update={"status": TaskStatus.completed}))
    panel = await viewer.get(f"/panels/tasks?q={p}&sort=tokens&dir=desc")
    assert panel.status_code == 200 and "<html" not in panel.text
    assert [task_id for task_id, _ in rows(panel)] == [f"{p}-b", f"{p}-a"]
    assert 'data-status="completed"' in panel.text or "status-completed" in panel.text
    assert 'data-sort="tokens" aria-sort="descending"' in panel.text


async def test_a_panel_with_a_filter_it_cannot_use_is_refused_by_name(sign_in: SignIn) -> None:
    viewer = await sign_in(Role.viewer)
    refused = await viewer.get("/panels/tasks?within=2w")
    assert refused.status_code == 422
    assert "within: &#39;2w&#39; is not one of 15m, 1h, 24h, 7d" in refused.text
    page = await viewer.get("/tasks?within=2w")
    assert page.status_code == 422 and flash(page).startswith("within:")
    assert "data-panel=" not in page.text and html.unescape("not followed") in page.text
