"""An interruption is billed once: the kept text is charged once, as kept, and a shortfall says what is missing.

Before, after a node was killed mid-generation, the kept text was billed as kept tokens and again as
the continuation's prompt (and reserved twice): a 1,530-token job with a 1,700-token budget stopped
in `awaiting_budget` and finished at 4,482 tokens, and `waiting_for` asked for 8,000 more tokens
when 334 were needed. Real workflow, dev server, engine and store; the first node is cut by a
preemption notice after writing the start of the real answer, the second runs the real step.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from pathlib import Path

from temporalio.client import Client

from activities.step.tokens import encode
from sdk import Agent, TaskStatus
from tests.security.parties import Live
from tests.workflow.fleet_fakes import UNSEEN_TOKENS, PreemptedNode, TwoNodePool, fleet_bench


async def test_a_cut_job_that_fits_its_budget_uncut_fits_it_cut(
    temporal_client: Client, engine_url: str, tmp_path: Path
) -> None:
    async with fleet_bench(temporal_client, engine_url, tmp_path) as bench:
        store, node_a = bench.store, bench.node("gpu-a")
        uncut = await bench.run(f"uncut-{bench.tag}", 50_000, TwoNodePool([bench.real_node]), {})
        assert uncut.status == TaskStatus.completed and uncut.result
        job = uncut.spend.tokens_used
        # What the cut run may add: the tokens the cut node wrote after its last report (lost), and the
        # reservation's template margin (2% + 8) on the continuation's prompt. Before, the kept text (~150
        # tokens) counted twice.
        budget = job + UNSEEN_TOKENS + 24
        cutter = PreemptedNode(uncut.result)
        cut = await bench.run(
            f"cut-{bench.tag}", budget, TwoNodePool([node_a, bench.real_node]), {node_a: cutter}, grace_s=5
        )
        assert cut.status == TaskStatus.completed, (cut.status, cut.waiting_for, cut.error)
        assert cut.result == uncut.result and cutter.calls == 1
        statuses = [e.data["status"] for e in store.events.read(cut.task_id) if e.kind == "state"]
        assert "awaiting_budget" not in statuses
        kept = len(encode(cutter.prefix))
        totals = store.ledger.totals(cut.task_id)
        assert (totals.kept_tokens, totals.lost_tokens) == (kept, UNSEEN_TOKENS)
        assert totals.tokens == cut.spend.tokens_used <= budget
        # Charged as the uncut job plus what was lost, and the few tokens that wrap the re-sent text as an
        # assistant message (~4, and the tokenizers' seam at the cut): not the kept text a second time.
        assert 0 <= cut.spend.tokens_used - job - UNSEEN_TOKENS <= 8


async def test_waiting_for_says_what_the_next_step_really_needs(live: Live) -> None:
    """An answer cut short by the budget waits for more: raising by exactly what `waiting_for` asks lets the next
    step run. Before, it asked for the agent's whole max_tokens_per_step whatever was needed."""
    writer = Agent(f"writer-{uuid.uuid4().hex[:6]}", "llama-3.2-1b", "Write at length.", max_tokens_per_step=1024)
    live.register(writer)
    async with live.as_key(live.key()) as http:
        task = (
            await http.post(
                "/v1/tasks",
                json={
                    "agent": writer.name,
                    "input": "alpha\nlength: 400 tokens",
                    "budget": {"tokens": 200},
                    "budget_grace_s": 600,
                },
            )
        ).json()["task_id"]
        waiting = await live.wait_for(http, task, TaskStatus.awaiting_budget)
        asked = re.fullmatch(
            r"budget: (\d+) more tokens for the next step \(up to (\d+) for a full 1024-token answer\)",
            waiting.waiting_for or "",
        )
        assert asked is not None, waiting.waiting_for
        least, full = int(asked[1]), int(asked[2])
        assert least < full - 900  # the next step's prompt and a minimum answer, not a whole answer's worth
        calls = len(live.store.events.of_kind(task, "llm_call"))
        assert (await http.post(f"/v1/tasks/{task}/raise-budget", json={"tokens": least})).status_code == 200
        for _ in range(600):  # the step runs again: a call is made, not another shortfall
            if len(live.store.events.of_kind(task, "llm_call")) > calls:
                break
            await asyncio.sleep(0.2)
        assert len(live.store.events.of_kind(task, "llm_call")) == calls + 1
        await http.post(f"/v1/tasks/{task}/cancel", json={"reason": "seen enough"})
