"""Whether a tool worker serves an agent's queue: asked when a tool call has waited a few seconds.

A task whose author never ran `serve()` otherwise shows `running` with no reason while its tool call
sits in Temporal's queue for minutes. The task queue's pollers (workers seen polling it in the last
few minutes) are the one fact that tells a missing worker from a slow tool.
"""

from __future__ import annotations

from temporalio import activity
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

TOOL_WORKERS = "berth.tool_workers"


class ToolWorkers:
    def __init__(self, client: Client) -> None:
        self.client = client

    @activity.defn(name=TOOL_WORKERS)
    async def polling(self, task_queue: str) -> int:
        """How many workers polled `task_queue` for tool calls recently (0: nobody serves it)."""
        described = await self.client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=self.client.namespace,
                task_queue=TaskQueue(name=task_queue),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
            )
        )
        return len(described.pollers)
