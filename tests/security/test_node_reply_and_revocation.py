"""What a node says in its reply moves no budget, and a revoked node keeps no step, even one that never lets go.

Real workflow, dev server, engine and store, on a stand-in pool of two nodes: the first misbehaves,
the second runs the real step. The workflow charges what the ledger booked for the step (read back
when it releases the lease), so a node answering without booking is a failed call and is passed over.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio.client import Client

from sdk import TaskStatus
from sdk.wire.contracts import NODE_GONE_SIGNAL, NodeGone
from tests.workflow.fleet_fakes import LyingNode, StalledNode, TwoNodePool, fleet_bench


async def test_a_reply_the_node_never_booked_is_a_failed_call_and_is_charged_nothing(
    temporal_client: Client, engine_url: str, tmp_path: Path
) -> None:
    async with fleet_bench(temporal_client, engine_url, tmp_path) as bench:
        liar = bench.node("gpu-liar")
        pool = TwoNodePool([liar, bench.real_node])
        state = await bench.run(f"lied-{bench.tag}", 50_000, pool, {liar: LyingNode(completion_tokens=10**9)})
        assert state.status == TaskStatus.completed, state.error
        assert state.result != "forged answer" and pool.placed == {liar: 1, bench.real_node: 1}
        assert liar in pool.asked[-1].exclude_nodes
        assert state.spend.tokens_used == bench.store.ledger.totals(state.task_id).tokens <= 50_000


async def test_a_revoked_node_loses_its_step_even_when_it_never_answers_the_cut(
    temporal_client: Client, engine_url: str, tmp_path: Path
) -> None:
    async with fleet_bench(temporal_client, engine_url, tmp_path) as bench:
        stalled, node = StalledNode(), bench.node("gpu-stalled")
        pool = TwoNodePool([node, bench.real_node])
        async with bench.workers(pool, {node: stalled}):
            try:
                handle = await bench.start(f"revoked-{bench.tag}", 50_000)
                await asyncio.wait_for(stalled.started.wait(), timeout=60)
                await handle.signal(NODE_GONE_SIGNAL, NodeGone(node_id=node, reason="revoked by an operator"))
                state = await handle.result()
            finally:
                stalled.released.set()
        assert state.status == TaskStatus.completed, state.error
        assert pool.placed == {node: 1, bench.real_node: 1} and node in pool.asked[-1].exclude_nodes
        [cut] = [e.data for e in bench.store.events.read(state.task_id) if e.kind == "interruption"]
        assert (cut["kind"], cut["node_id"], cut["resumed_on"]) == ("revoked", node, bench.real_node)
        assert (cut["tokens_kept"], cut["tokens_lost"]) == (0, 0)  # nothing a revoked node wrote is kept
