"""A step cut off on one node resumes on another and continues the text the cut generation wrote.

Real workflow, real dev server, real engine and store. The pool is a small stand-in that places a
step on the first of two nodes it was not told to exclude; node "gpu-a" is a fake whose generation
is cut by a preemption notice after writing the start of the real answer (it reports the text, as
the real activity does), node "gpu-b" runs the real LLM step activity against the engine.
"""

from __future__ import annotations

from pathlib import Path

from temporalio.client import Client

from activities.tokens import encode
from sdk import TaskStatus
from tests.workflow.fleet_fakes import UNSEEN_TOKENS, PreemptedNode, TwoNodePool, fleet_bench


async def test_a_step_preempted_mid_answer_continues_its_text_on_another_node(
        temporal_client: Client, engine_url: str, tmp_path: Path) -> None:
    async with fleet_bench(temporal_client, engine_url, tmp_path) as bench:
        store, tag = bench.store, bench.tag
        node_a, node_b = bench.node("gpu-a"), bench.real_node
        uncut = await bench.run(f"uncut-{tag}", 50_000, TwoNodePool([node_b]), {})
        assert uncut.status == TaskStatus.completed and uncut.result and len(uncut.result) > 1200

        pool, cutter = TwoNodePool([node_a, node_b]), PreemptedNode(uncut.result)
        state = await bench.run(f"cut-{tag}", 50_000, pool, {node_a: cutter})
        assert state.status == TaskStatus.completed, state.error
        assert state.result == uncut.result  # the same answer, its start written on the preempted node
        assert cutter.calls == 1 and pool.placed == {node_a: 1, node_b: 1}
        # Placed again away from the preempted node, and from its zone's spot capacity.
        assert (pool.asked[-1].exclude_nodes, pool.asked[-1].avoid_spot_zones) == ([node_a], ["z1"])
        assert state.interruptions == 1 and state.spend.tokens_used <= 50_000

        # While the step was placed again its task said why it was not running: a preemption, not a shortage.
        troubles = [(e.data["status"], e.data.get("gpu_trouble")) for e in store.events.read(state.task_id)
                    if e.kind == "state"]
        assert ("waiting_for_gpu", "preemption") in troubles and ("running", None) in troubles[-3:]
        kept = len(encode(cutter.prefix))
        [cut] = [e.data for e in store.events.read(state.task_id) if e.kind == "interruption"]
        assert (cut["kind"], cut["node_id"], cut["resumed_on"]) == ("notice", node_a, node_b)
        assert (cut["tokens_kept"], cut["tokens_lost"]) == (kept, UNSEEN_TOKENS)
        totals = store.ledger.totals(state.task_id)
        assert (totals.kept_tokens, totals.lost_tokens) == (kept, UNSEEN_TOKENS)
        assert totals.tokens == state.spend.tokens_used  # the budget charged what the ledger booked, kept included
        # Only the rest of the answer was generated on gpu-b (the kept text was its prompt, not its output).
        assert abs(totals.completion_tokens + kept - store.ledger.totals(uncut.task_id).completion_tokens) <= 2
        # The cut node's lease was released as gone, the serving one as warm.
        assert [(r.replica_warm, r.replica_gone) for r in pool.released] == [(False, True), (True, False)]
