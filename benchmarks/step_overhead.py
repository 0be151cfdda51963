"""Per-step orchestration overhead, and throughput with many tasks at once.

A 100-step agent task (99 tool steps and the answer) runs on the simulated engine with no
artificial latency, so what is measured is Berth itself: token counting, the litellm call,
the ledger, checkpoints, the budget. The baseline is a bare workflow running the same
number of activities (one per LLM call plus one per tool call) on the same dev server in
the same process, all on the workflow's own queue (`overhead_ratio`, the goal: ≤ 1.5).

That baseline is the cheapest possible: Temporal starts every activity eagerly, in the reply
to the workflow task, which a tool call on the agent's own queue (served by the author's
worker) can never be. So the figures also give the ratio to a bare workflow of a Berth
step's shape (`*_same_shape`): the LLM-call activity on the workflow's queue, the tool call
on a second queue served by a second worker. The difference between the two is the price
of running tools in the author's process, not of Berth's bookkeeping.

    python -m benchmarks.step_overhead
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.contrib.pydantic import pydantic_data_converter  # noqa: E402
from temporalio.testing import WorkflowEnvironment  # noqa: E402
from temporalio.worker import UnsandboxedWorkflowRunner, Worker  # noqa: E402

from orchestrator.config import BerthConfig  # noqa: E402
from orchestrator.store import Store  # noqa: E402
from orchestrator.worker import build_worker  # noqa: E402
from sdk import (
    Agent,  # noqa: E402
    tool_worker,  # noqa: E402
)

from ._results import write_results  # noqa: E402
from ._tasks import observe, run_task  # noqa: E402
from .bare_workflow import BareLoopWorkflow, BareStepWorkflow, echo  # noqa: E402

STEPS = 100
CONCURRENT_TASKS = 50
STEPS_PER_CONCURRENT_TASK = 10
BARE_TOOL_QUEUE = "bench-bare-tools"


AGENT = Agent(
    "bench-agent",
    "llama-3.2-1b",
    "Observe each topic, then answer.",
    [observe],
    max_steps=STEPS + 10,
    max_tokens_per_step=64,
)


async def _bare(client: Client, queue: str, activities: int) -> None:
    """All activities on the workflow's own queue (every one eager)."""
    await client.execute_workflow(
        BareLoopWorkflow.run, activities, id=f"bare-{uuid.uuid4().hex[:10]}", task_queue=queue
    )


async def _bare_steps(client: Client, queue: str, steps: int) -> None:
    """A Berth task's shape: per step one activity here and, but for the last step, one on BARE_TOOL_QUEUE."""
    await client.execute_workflow(
        BareStepWorkflow.run, args=[steps, BARE_TOOL_QUEUE], id=f"bare-{uuid.uuid4().hex[:10]}", task_queue=queue
    )


async def main() -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="berth-bench-"))
    port = _free_port()
    engine = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.engines.simulated", "--port", str(port), "--latency-scale", "0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(Path(sys.executable).parent / "temporal"), data_converter=pydantic_data_converter
    )
    try:
        await _wait(f"http://127.0.0.1:{port}/health")
        config = BerthConfig(
            data_dir=tmp, engine_url=f"http://127.0.0.1:{port}/v1", database_url=f"sqlite:///{tmp / 'berth.db'}"
        )
        store = Store.open(config.resolved_database_url)
        store.agents.register(AGENT.spec())
        client = env.client
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(build_worker(client, store, config, task_queue="bench-control"))
            await stack.enter_async_context(tool_worker(client, AGENT))
            await stack.enter_async_context(
                # Run as Berth's worker runs its workflows (outside the sandbox), so the ratio is Berth's work alone.
                Worker(
                    client,
                    task_queue="bench-bare",
                    workflows=[BareLoopWorkflow, BareStepWorkflow],
                    activities=[echo],
                    workflow_runner=UnsandboxedWorkflowRunner(),
                )
            )
            await stack.enter_async_context(Worker(client, task_queue=BARE_TOOL_QUEUE, activities=[echo]))
            await run_task(client, store, AGENT, "bench-control", 3)  # warm-up: imports, tokenizer, connections
            await _bare(client, "bench-bare", 5)
            await _bare_steps(client, "bench-bare", 3)

            activities = STEPS + (STEPS - 1)  # one LLM call per step, one tool call per tool step
            t0 = time.perf_counter()
            await _bare_steps(client, "bench-bare", STEPS)
            bare_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            await _bare(client, "bench-bare", activities)
            bare_eager_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            state = await run_task(client, store, AGENT, "bench-control", STEPS - 1)
            berth_s = time.perf_counter() - t0
            assert state.step == STEPS

            per_task = STEPS_PER_CONCURRENT_TASK - 1
            t0 = time.perf_counter()
            await asyncio.gather(*(_bare_steps(client, "bench-bare", per_task + 1) for _ in range(CONCURRENT_TASKS)))
            bare_many_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            await asyncio.gather(*(_bare(client, "bench-bare", 2 * per_task + 1) for _ in range(CONCURRENT_TASKS)))
            bare_many_eager_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            states = await asyncio.gather(
                *(run_task(client, store, AGENT, "bench-control", per_task) for _ in range(CONCURRENT_TASKS))
            )
            berth_many_s = time.perf_counter() - t0
            total_steps = sum(s.step for s in states)
    finally:
        await env.shutdown()
        engine.terminate()
        engine.wait(10)

    figures = {
        "steps": STEPS,
        "activities_per_task": activities,
        "berth_task_s": round(berth_s, 3),
        "berth_ms_per_step": round(1000 * berth_s / STEPS, 2),
        "bare_workflow_s": round(bare_eager_s, 3),
        "bare_ms_per_step_equivalent": round(1000 * bare_eager_s / STEPS, 2),
        "overhead_ratio": round(berth_s / bare_eager_s, 3),
        "goal": "overhead_ratio <= 1.5",
        "bare_same_shape_s": round(bare_s, 3),
        "bare_same_shape_ms_per_step_equivalent": round(1000 * bare_s / STEPS, 2),
        "overhead_ratio_same_shape": round(berth_s / bare_s, 3),
        "concurrent_tasks": CONCURRENT_TASKS,
        "concurrent_steps_total": total_steps,
        "concurrent_berth_s": round(berth_many_s, 3),
        "concurrent_steps_per_s": round(total_steps / berth_many_s, 1),
        "concurrent_bare_s": round(bare_many_eager_s, 3),
        "concurrent_ratio": round(berth_many_s / bare_many_eager_s, 3),
        "concurrent_bare_same_shape_s": round(bare_many_s, 3),
        "concurrent_ratio_same_shape": round(berth_many_s / bare_many_s, 3),
    }
    path = write_results("step_overhead", figures)
    print(f"bare workflow, {activities} activities, all eager:       {bare_eager_s:7.2f} s")
    print(f"bare workflow, {activities} activities, a step's shape:  {bare_s:7.2f} s")
    print(
        f"Berth task, {STEPS} steps:                             {berth_s:7.2f} s  "
        f"({figures['berth_ms_per_step']} ms/step)"
    )
    print(
        f"overhead ratio:                      {figures['overhead_ratio']:7.3f}  (goal ≤ 1.5; "
        f"{figures['overhead_ratio_same_shape']} against a bare workflow of a step's shape)"
    )
    print(
        f"{CONCURRENT_TASKS} tasks at once: {total_steps} steps in {berth_many_s:.2f} s = "
        f"{figures['concurrent_steps_per_s']} steps/s; ratio to bare {figures['concurrent_ratio']} "
        f"({figures['concurrent_ratio_same_shape']} against the step's shape)"
    )
    print(f"figures written to {path}")
    return figures


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _wait(url: str) -> None:
    async with httpx.AsyncClient() as http:
        for _ in range(300):
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get(url)).status_code == 200:
                    return
            await asyncio.sleep(0.1)
    raise TimeoutError(url)


if __name__ == "__main__":
    asyncio.run(main())
