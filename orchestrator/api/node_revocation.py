"""Revoking and removing a node: its credential dies at once, and the steps it runs move elsewhere.

The store kills the credential (node_admission.py); the pool, at its next sync, takes the node out of
placement and releases its leases. What neither can do is tell the workflows whose steps run there:
a generation on a revoked node would otherwise run on until its heartbeat timeout, writing into books
that refuse it. So each task that holds a lease on the node gets the `node_gone` signal, and its
workflow cuts the step and places it again.

The leases are read before and after the revocation: a lease the pool granted in the moment between
(its view of the fleet was a second old) is caught by the second read; one held before is caught by the
first, even when the pool has released it by the second. A task whose workflow has ended, or a Temporal
that does not answer, does not undo or fail the revocation: the credential is dead either way, and a
step left on the node ends as a lost node's does. Those tasks are named in the answer.
"""

from __future__ import annotations

import asyncio
import logging

from temporalio.client import RPCTimeoutOrCancelledError

from sdk.wire.contracts import NodeGone
from sdk.wire.fleet import NodeRevocation

from ..store import Store
from .services import Services
from .temporal_gateway import TemporalUnavailable, WorkflowGone

log = logging.getLogger("berth.api.nodes")


async def revoke_node(svc: Services, node_id: str, *, remove: bool) -> NodeRevocation:
    """Revoke `node_id` (and, with `remove`, forget it), then tell the tasks it ran steps for to move them.
    Raises the store's NodeNotFound for an id never registered, before anything changes."""
    leased = await svc.db(_tasks_leased_on, svc.store, node_id)
    await svc.db(svc.store.node_admission.revoke, node_id)
    leased |= await svc.db(_tasks_leased_on, svc.store, node_id)
    if remove:
        await svc.db(svc.store.node_admission.remove, node_id)
    reason = f"node {node_id} was {'removed' if remove else 'revoked'} by an operator"
    told = await asyncio.gather(
        *(_tell(svc, task_id, NodeGone(node_id=node_id, reason=reason)) for task_id in sorted(leased))
    )
    moved = [task_id for task_id, ok in zip(sorted(leased), told) if ok]
    unreached = [task_id for task_id, ok in zip(sorted(leased), told) if not ok]
    log.info("%s: %d task(s) told to move their steps, %d not reached", reason, len(moved), len(unreached))
    return NodeRevocation(node_id=node_id, removed=remove, tasks_moved=moved, tasks_unreached=unreached)


def _tasks_leased_on(store: Store, node_id: str) -> set[str]:
    return {lease.task_id for lease in store.leases.list() if lease.node_id == node_id}


async def _tell(svc: Services, task_id: str, gone: NodeGone) -> bool:
    try:
        await svc.temporal.node_gone(task_id, gone)
    except (WorkflowGone, TemporalUnavailable, RPCTimeoutOrCancelledError) as exc:
        log.warning("task %s was not told that %s: %s", task_id, gone.reason, exc)
        return False
    return True
