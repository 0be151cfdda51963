"""The baseline: a bare Temporal workflow running N trivial activities one after another.

It costs exactly the Temporal round trips a step loop cannot avoid, so Berth's overhead per
step is the ratio of the two times.
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
