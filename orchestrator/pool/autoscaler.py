"""The scaler's loop: every few seconds, plan (orchestrator.pool.scaler) and carry the plan out.

Loads and unloads run as small workflows (workflows/fleet_ops.py) on the control queue, each
driving one activity on the node's own queue: they survive this process restarting, and a
workflow id per replica makes a repeated order a no-op. A replica is taken out of placement
(`begin_unload`) before its node is told to stop it, so no lease lands on a replica being
unloaded; its weights stay in the node's disk cache for the next load.

With several control-plane replicas, one scaler acts at a time: the one whose pool holds the
"scaler" leadership in the store (renewed every tick, taken over by another replica once a
silent holder's term runs out). Its pool counts the other pools' leases as load, so it never
unloads a replica another replica's steps are using; steps that wait in another pool start
replicas through placement itself.
"""

from __future__ import annotations

import asyncio
import logging

from temporalio.client import Client
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from sdk.wire.contracts import CONTROL_TASK_QUEUE
from sdk.wire.node_io import LOAD_WORKFLOW, UNLOAD_WORKFLOW, UnloadOnNode, UnloadReplica

from .scaler import ScaleDown, ScaleUp
from .service import PoolService

log = logging.getLogger("berth.pool.autoscaler")

TICK_S = 2.0
SCALER_JOB = "scaler"
# A leader that misses this many ticks in a row is taken over.
TICKS_PER_TERM = 5
# What the scaler learned is written for the API every 5 ticks (10 s): one small write per model, and an
# operator reading `berth models show` sees it at most 10 s old.
PUBLISH_EVERY_TICKS = 5


class Autoscaler:
    def __init__(
        self, pool: PoolService, client: Client, task_queue: str = CONTROL_TASK_QUEUE, tick_s: float = TICK_S
    ) -> None:
        self.pool = pool
        self.client = client
        self.task_queue = task_queue
        self.tick_s = tick_s
        self._ticks = 0

    async def run(self) -> None:
        """Tick until cancelled; a failed tick is logged and the next one tried."""
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("scaler tick failed")
            await asyncio.sleep(self.tick_s)

    async def tick(self) -> list[ScaleUp | ScaleDown]:
        """Plan once and start what the plan says, when this replica leads the scaler; returns the plan."""
        store, me = self.pool.store, self.pool.pool_id
        if not await asyncio.to_thread(store.leadership.hold, SCALER_JOB, me, TICKS_PER_TERM * self.tick_s):
            return []
        plan = await asyncio.to_thread(self.pool.plan_scaling)
        for action in plan:
            if isinstance(action, ScaleDown):
                await self._unload(action)
            else:
                await self._load(action)
        self._ticks += 1
        if self._ticks % PUBLISH_EVERY_TICKS == 1:
            await asyncio.to_thread(store.models.publish_foresight, self.pool.foresight_views())
        return plan

    async def _unload(self, action: ScaleDown) -> None:
        if not await asyncio.to_thread(self.pool.begin_unload, action.replica_id):
            return  # took a lease since the plan was made
        log.info("unloading %s of %s on %s: %s", action.replica_id, action.model, action.node_id, action.reason)
        order = UnloadOnNode(node_id=action.node_id, request=UnloadReplica(replica_id=action.replica_id))
        await self._start(UNLOAD_WORKFLOW, order, f"unload-{action.replica_id}")

    async def _load(self, action: ScaleUp) -> None:
        order = await asyncio.to_thread(
            self.pool.start_replica, action.model, action.reason if action.prewarm else None
        )
        if order is None:
            log.info("cannot add a replica of %s now (%s): nothing fits", action.model, action.reason)
            return
        log.info("loading %s of %s on %s: %s", order.request.replica_id, action.model, order.node_id, action.reason)
        await self._start(LOAD_WORKFLOW, order, f"load-{order.request.replica_id}")

    async def _start(self, workflow: str, order: object, workflow_id: str) -> None:
        try:
            await self.client.start_workflow(
                workflow,
                order,
                id=workflow_id,
                task_queue=self.task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            )
        except WorkflowAlreadyStartedError:
            pass  # the same order, given before: nothing to add
