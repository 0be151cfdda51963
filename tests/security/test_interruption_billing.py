"""An interruption is billed once: the kept text is charged once, as kept, and a shortfall says what is missing.

Before, after a node was killed mid-generation, the kept text was billed as kept tokens and again as
the continuation's prompt (and reserved twice): a 1,530-token job with a 1,700-token budget stopped
in `awaiting_budget` and finished at 4,482 tokens, and `waiting_for` asked for 8,000 more tokens
when 334 were needed. Real workflow, dev server, engine and store; the first node is cut by a
preemption notice after writing the start of the real answer, the second runs the real step.
"""

from __future__ import annotations

from pathlib import Path

from temporalio.client import Client

from activities.tokens import encode
from sdk import TaskStatus
from tests.workflow.fleet_fakes import UNSEEN_TOKENS, PreemptedNode, TwoNodePool, fleet_bench


async def test_a_cut_job_that_fits_its_budget_uncut_fits_it_cut(temporal_client: Client, engine_url: str,
                                                                tmp_path: Path) -> None:
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
        cut = await bench.run(f"cut-{bench.tag}", budget, TwoNodePool([node_a, bench.real_node]), {node_a: cutter},
                              grace_s=5)
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
