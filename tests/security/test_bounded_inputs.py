"""Bounded inputs, played as a careless or hostile client: numbers beyond 64 bits, booleans sent as numbers,
a megabyte where a sentence goes, thousands of tools. Each is refused by name (the field, the reason) with
a 4xx, in the UI as a page and on /v1 in the API's error shape, and nothing reaches the store or Temporal.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from datetime import datetime, timezone

import httpx
import pytest

from orchestrator.store import Store
from sdk import AgentSpec, Spend, TaskSpec, TaskState, TaskStatus, ToolSpec
from sdk._identity import Role
from tests.security.parties import error_of

BEYOND_64_BITS = 2**64 + 1  # Python's C code (sqlite3, struct) raises OverflowError past 2**63 - 1


def _csrf_of(page: httpx.Response) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert found, page.text[:500]
    return found.group(1)


@pytest.fixture
async def browser(app, admin_key: str) -> AsyncIterator[httpx.AsyncClient]:
    """A browser signed in to the admin UI with the admin key."""
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://berth") as client:
        form = await client.get("/login")
        signed = await client.post("/login", data={"api_key": admin_key, "csrf_token": _csrf_of(form)})
        assert signed.status_code == 303, signed.text[:500]
        yield client


@pytest.fixture
def agent(store: Store) -> AgentSpec:
    return store.agents.register(AgentSpec(name=f"bounded-{uuid.uuid4().hex[:8]}", model="llama-3.1-8b",
                                           tools=[ToolSpec(name="lookup")]))


@pytest.fixture
def task(store: Store, agent: AgentSpec) -> TaskState:
    """A running task's row, as the workflow leaves it (no workflow: the refusals come first)."""
    task_id = f"t-{uuid.uuid4().hex[:8]}"
    spec = TaskSpec(task_id=task_id, agent=agent.name, input="Summarise.", budget={"tokens": 5000})
    state = TaskState(task_id=task_id, agent=agent.name, agent_version=agent.version, model=agent.model,
                      tenant="default", status=TaskStatus.running, max_steps=agent.max_steps,
                      spend=Spend(token_limit=5000), updated_at=datetime.now(timezone.utc))
    assert store.tasks.create(task_id, spec.model_dump_json(), state)
    return state


# -- integers beyond 64 bits ------------------------------------------------------------------


@pytest.mark.parametrize(("path", "field"), [
    ("/tasks/{task}/checkpoints/{huge}", "seq"),
    ("/tasks/{task}/live?after={huge}", "after"),
    ("/tasks?page={huge}", "page"),
    ("/audit?page={huge}", "page"),
])
async def test_the_ui_refuses_an_integer_beyond_64_bits_with_a_page_not_a_crash(
        browser: httpx.AsyncClient, task: TaskState, path: str, field: str) -> None:
    refused = await browser.get(path.format(task=task.task_id, huge=BEYOND_64_BITS))
    assert refused.status_code == 422, refused.text[:500]
    assert refused.headers["content-type"].startswith("text/html")
    assert "Traceback" not in refused.text and "OverflowError" not in refused.text
    assert f"{field}:" in refused.text


@pytest.mark.parametrize(("action", "form"), [
    ("fork", {"checkpoint_seq": str(BEYOND_64_BITS)}),
    ("raise-budget", {"tokens": str(BEYOND_64_BITS)}),
])
async def test_the_ui_refuses_a_form_integer_beyond_64_bits_by_name(
        browser: httpx.AsyncClient, task: TaskState, action: str, form: dict[str, str]) -> None:
    page = await browser.get(f"/tasks/{task.task_id}")
    assert page.status_code == 200, page.text[:500]
    refused = await browser.post(f"/tasks/{task.task_id}/{action}", data={**form, "csrf_token": _csrf_of(page)})
    assert refused.status_code == 422, refused.text[:500]
    assert f"{next(iter(form))}:" in refused.text


async def test_the_api_refuses_an_integer_beyond_64_bits_by_name(api: httpx.AsyncClient, task: TaskState) -> None:
    for path, field in ((f"/v1/tasks/{task.task_id}/checkpoints/{BEYOND_64_BITS}", "seq"),
                        (f"/v1/tasks/{task.task_id}/events?after={BEYOND_64_BITS}", "after"),
                        (f"/v1/tasks?offset={BEYOND_64_BITS}", "offset")):
        refused = await api.get(path)
        assert refused.status_code == 422 and error_of(refused)["field"] == field, (path, refused.text)
