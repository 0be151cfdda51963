"""A step cut off on one node resumes on another and continues the text the cut generation wrote.

Real workflow, real dev server, real engine and store. The pool is a small stand-in that places a
step on the first of two nodes it was not told to exclude; node "gpu-a" is a fake whose generation
is cut by a preemption notice after writing the start of the real answer (it reports the text, as
the real activity does), node "gpu-b" runs the real LLM step activity against the engine.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio.client import Client

from activities.step.tokens import encode
from sdk import TaskStatus
from tests.workflow.fleet_fakes import (
    UNSEEN_TOKENS,
    BusyNodesPool,
    DyingPool,
    PreemptedNode,
    QuietOnceNode,
    QuietThenDeadNode,
    TwoNodePool,
    fleet_bench,
)


async def test_a_step_preempted_mid_answer_continues_its_text_on_another_node(
    temporal_client: Client, engine_url: str, tmp_path: Path
) -> None:
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
        troubles = [
            (e.data["status"], e.data.get("gpu_trouble")) for e in store.events.read(state.task_id) if e.kind == "state"
        ]
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


async def test_a_busy_node_that_picks_its_call_up_late_keeps_the_step_and_nothing_is_cut(
    temporal_client: Client, engine_url: str, tmp_path: Path
) -> None:
    """A late pickup on a live node is load, not a lost node: the step waits there, says so, and is never moved."""
    async with fleet_bench(temporal_client, engine_url, tmp_path) as bench:
        node, pool = bench.real_node, BusyNodesPool([bench.real_node, bench.node("gpu-c")])
        async with bench.workers(pool, {}, real_node=False):
            handle = await bench.start(f"late-{bench.tag}", 50_000)

            async def told_it_waits() -> bool:
                return any(
                    "the node is busy, not gone" in (e.data.get("waiting_for") or "")
                    for e in bench.store.events.read(handle.id)
                    if e.kind == "state"
                )

            for _ in range(1200):  # the node's worker comes up only once the step has waited past a pickup window
                if await told_it_waits():
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("the step never said it waits for its busy node")
            async with bench.real_node_worker():
                state = await handle.result()
        assert state.status == TaskStatus.completed, state.error
        assert state.interruptions == 0 and pool.placed == {node: 1}  # one lease, on the node it was given
        assert not [e for e in bench.store.events.read(state.task_id) if e.kind == "interruption"]
        totals = bench.store.ledger.totals(state.task_id)
        assert (totals.calls, totals.lost_tokens) == (1, 0) and totals.tokens == state.spend.tokens_used


async def test_a_quiet_generation_on_a_live_node_goes_on_there_and_is_not_cut_as_lost(
    temporal_client: Client, engine_url: str, tmp_path: Path
) -> None:
    """Heartbeats that stop on a node whose process is alive are a starved machine, not a lost node: the step keeps
    its lease and replica, continues the text the last beat carried, and says so; nothing counts as interrupted."""
    async with fleet_bench(temporal_client, engine_url, tmp_path) as bench:
        uncut = await bench.run(f"uncut-{bench.tag}", 50_000, TwoNodePool([bench.real_node]), {})
        assert uncut.status == TaskStatus.completed and uncut.result
        quiet_node = bench.node("gpu-q")
        busy = BusyNodesPool([quiet_node, bench.real_node])
        quiet = QuietOnceNode(uncut.result, bench.real_generation())
        state = await bench.run(f"quiet-{bench.tag}", 50_000, busy, {quiet_node: quiet})
        assert state.status == TaskStatus.completed, state.error
        assert state.result == uncut.result  # its start written before the silence, the rest after it
        assert busy.placed == {quiet_node: 1} and len(busy.released) == 1  # one lease, never moved
        assert [c.attempt_base for c in quiet.calls] == [0, 1]  # the next attempt of the same placement
        events = bench.store.events.read(state.task_id)
        assert state.interruptions == 0 and not [e for e in events if e.kind == "interruption"]
        kept = len(encode(quiet.prefix))
        [said] = [e.data for e in events if e.kind == "generation_quiet"]
        assert (said["node_id"], said["continued"], said["tokens_carried"]) == (quiet_node, 1, kept + UNSEEN_TOKENS)
        assert any(
            "went quiet but the node is alive" in (e.data.get("waiting_for") or "") for e in events if e.kind == "state"
        )
        totals = bench.store.ledger.totals(state.task_id)
        assert (totals.kept_tokens, totals.lost_tokens) == (kept, UNSEEN_TOKENS)
        assert totals.tokens == state.spend.tokens_used


async def test_a_node_that_goes_quiet_then_dies_leaves_the_text_it_wrote_to_the_next_node(
    temporal_client: Client, engine_url: str, tmp_path: Path
) -> None:
    """A quiet generation continued on its live node, whose node then dies before the continuation reports anything:
    the cut keeps the text the quiet generation wrote (the continuation had nothing of its own), and the next node
    goes on from it. Before, the cut read only the continuation's silence and kept nothing."""
    async with fleet_bench(temporal_client, engine_url, tmp_path) as bench:
        uncut = await bench.run(f"uncut-{bench.tag}", 50_000, TwoNodePool([bench.real_node]), {})
        assert uncut.status == TaskStatus.completed and uncut.result
        doomed = bench.node("gpu-d")
        pool = DyingPool([doomed, bench.real_node])
        node = QuietThenDeadNode(uncut.result, bench.real_generation())
        state = await bench.run(f"dies-{bench.tag}", 50_000, pool, {doomed: node})
        assert state.status == TaskStatus.completed, state.error
        assert state.result == uncut.result  # its start written on the node that died, the rest on the next
        assert [c.attempt_base for c in node.calls] == [0, 1] and pool.placed == {doomed: 1, bench.real_node: 1}
        events = bench.store.events.read(state.task_id)
        kept = len(encode(node.prefix))
        [cut] = [e.data for e in events if e.kind == "interruption"]
        assert (cut["kind"], cut["node_id"], cut["resumed_on"]) == ("lost", doomed, bench.real_node)
        assert (cut["tokens_kept"], cut["tokens_lost"]) == (kept, UNSEEN_TOKENS)
        totals = bench.store.ledger.totals(state.task_id)
        assert (totals.kept_tokens, totals.lost_tokens) == (kept, UNSEEN_TOKENS)
        assert totals.tokens == state.spend.tokens_used
