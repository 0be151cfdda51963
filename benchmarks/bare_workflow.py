"""The baselines: bare Temporal workflows running trivial activities one after another.

They cost exactly the Temporal round trips a step loop cannot avoid, so Berth's overhead per
step is the ratio of the two times.

`BareStepWorkflow` has a Berth step's shape: one activity on the workflow's own task queue
(where Berth's LLM call runs; Temporal may start it eagerly, in the reply to the workflow
task that scheduled it) and one on a second queue served by another worker (where Berth's
tool calls run: the author's tool worker, which no workflow task can hand work to directly).
`BareLoopWorkflow` runs all its activities on its own queue, every one of them eager; a
Berth step cannot have that shape, so it favours the baseline by the cost of one
non-eager dispatch per step (about 50 ms on a 2-core machine).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow


@activity.defn(name="bench.echo")
async def echo(value: int) -> int:
    return value


@workflow.defn(name="BareLoopWorkflow")
class BareLoopWorkflow:
    @workflow.run
    async def run(self, activities: int) -> int:
        total = 0
        for i in range(activities):
            total += await workflow.execute_activity(echo, i, start_to_close_timeout=timedelta(seconds=30))
        return total


@workflow.defn(name="BareStepWorkflow")
class BareStepWorkflow:
    """`steps` steps: each one activity here, and all but the last one more on `second_queue`."""

    @workflow.run
    async def run(self, steps: int, second_queue: str) -> int:
        total = 0
        for i in range(steps):
            total += await workflow.execute_activity(echo, i, start_to_close_timeout=timedelta(seconds=30))
            if i < steps - 1:
                total += await workflow.execute_activity(
                    echo, i, task_queue=second_queue, start_to_close_timeout=timedelta(seconds=30)
                )
        return total
