"""Whether a tool worker serves an agent's queue: asked when a tool call has waited a few seconds.

A task whose author never ran `serve()`, or whose tool worker died, otherwise shows `running` with no reason
while its tool call sits in Temporal's queue for minutes. Temporal's list of a queue's pollers alone cannot
tell: it keeps a worker for minutes after its last poll (a SIGKILLed one too), and a live idle worker's last
poll may be a minute old (a long poll is answered after up to a minute). The evidence is the call itself: a
live worker with a free slot always has a poll waiting, and Temporal hands a new call to a waiting poll at
once. So a call still queued after TAKEN_WITHIN_S was scheduled when no worker had a poll waiting, and only a
worker that asked for work after that moment is serving the queue; one silent since is dead or busy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from temporalio import activity
from temporalio.api.enums.v1 import PendingActivityState, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from sdk.wire.contracts import TOOL_ACTIVITY, TOOL_WORKERS_ACTIVITY

# A call waiting this long was not handed to a waiting poll: Temporal matches one in milliseconds, and 2 s
# leaves room for the clocks of this worker and Temporal's server to differ by a little.
TAKEN_WITHIN_S = 2.0
QUEUED = PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED  # also between attempts, scheduled anew
TAKEN = (
    PendingActivityState.PENDING_ACTIVITY_STATE_STARTED,
    PendingActivityState.PENDING_ACTIVITY_STATE_CANCEL_REQUESTED,
)


@dataclass(frozen=True)
class ToolCallSeen:
    """One of the task's tool calls as Temporal holds it: taken by a worker (`started`), or queued since."""

    started: bool
    scheduled_at: datetime


def serving(polled_at: Sequence[datetime], calls: Sequence[ToolCallSeen], now: datetime) -> int:
    """How many workers serve the queue, by the evidence: each poller's last poll (`polled_at`) and the task's
    tool calls on it. A taken call means a worker serves it (the tool is slow). A call queued longer than
    TAKEN_WITHIN_S counts only the workers that polled after it was queued. Without either, the pollers as
    Temporal lists them."""
    if any(call.started for call in calls):
        return max(len(polled_at), 1)
    cutoff = now - timedelta(seconds=TAKEN_WITHIN_S)
    waiting = [call.scheduled_at for call in calls if call.scheduled_at <= cutoff]
    if not waiting:
        return len(polled_at)
    since = min(waiting)
    return sum(1 for polled in polled_at if polled >= since)


class ToolWorkers:
    def __init__(self, client: Client) -> None:
        self.client = client

    @activity.defn(name=TOOL_WORKERS_ACTIVITY)
    async def polling(self, task_queue: str) -> int:
        """How many workers serve `task_queue` for the calling task's tool calls (0: nobody does)."""
        described = await self.client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=self.client.namespace,
                task_queue=TaskQueue(name=task_queue),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
            )
        )
        polled_at = [p.last_access_time.ToDatetime(tzinfo=UTC) for p in described.pollers]
        return serving(polled_at, await self._tool_calls(), datetime.now(UTC))

    async def _tool_calls(self) -> list[ToolCallSeen]:
        """The calling task's tool calls Temporal has not seen end (a tool call goes to its agent's queue)."""
        info = activity.info()
        if info.workflow_id is None:  # run outside a task (a test's standalone activity): no calls to read
            return []
        task = self.client.get_workflow_handle(info.workflow_id, run_id=info.workflow_run_id)
        pending = (await task.describe()).raw_description.pending_activities
        return [
            ToolCallSeen(started=call.state in TAKEN, scheduled_at=call.scheduled_time.ToDatetime(tzinfo=UTC))
            for call in pending
            if call.activity_type.name == TOOL_ACTIVITY and call.state in (*TAKEN, QUEUED)
        ]
