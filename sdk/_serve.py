"""Serving an agent: its tools run in the author's own process, polled from its task queue.

Tools execute where their code, credentials and side effects live (the author's process),
not inside Berth; Berth's workflow only schedules them on `agent/<name>` with an
idempotency key, so a crash on either side neither loses nor repeats a finished call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

from temporalio import activity
from temporalio.client import Client as TemporalClient
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from ._agent import Agent
from ._limits import MAX_TOOL_RESULT_CHARS
from ._tool import ToolArgumentError, ToolCallContext
from .contracts import TOOL_ACTIVITY, ToolCallInput, ToolCallResult

log = logging.getLogger("berth.tools")


class ToolRunner:
    """The one activity an agent's queue serves: look up the tool, validate, run, report."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    @activity.defn(name=TOOL_ACTIVITY)
    async def run_tool(self, call: ToolCallInput) -> ToolCallResult:
        tool = self.agent.tools.get(call.name)
        if tool is None:
            available = ", ".join(sorted(self.agent.tools)) or "none"
            return ToolCallResult(call_id=call.call_id, ok=False,
                                  content=f"tool error: unknown tool {call.name!r}; available: {available}")
        context = ToolCallContext(call.task_id, call.step, call.call_id, activity.info().attempt)
        try:
            content = await tool.invoke(call.arguments, context)
        except ToolArgumentError as exc:
            # The model's mistake, not a transient failure: retrying would send the same arguments.
            return ToolCallResult(call_id=call.call_id, ok=False, content=f"tool error: bad arguments: {exc}")
        except Exception as exc:
            log.warning("tool %s failed on %s: %s", call.name, call.idempotency_key, exc)
            raise ApplicationError(f"{type(exc).__name__}: {exc}", type=type(exc).__name__) from exc
        if len(content) > MAX_TOOL_RESULT_CHARS:
            content = content[:MAX_TOOL_RESULT_CHARS] + f"\n[truncated to {MAX_TOOL_RESULT_CHARS} characters]"
        return ToolCallResult(call_id=call.call_id, ok=True, content=content)


async def serve(*agents: Agent, temporal_address: str = "127.0.0.1:7233", namespace: str = "default",
                api_url: str | None = None, api_key: str | None = None, register: bool = True,
                ready: asyncio.Event | None = None) -> None:
    """Register the agents with the control plane, then run their tools until cancelled."""
    if not agents:
        raise ValueError("serve() needs at least one Agent")
    if register:
        await register_agents(agents, api_url=api_url, api_key=api_key)
    client = await TemporalClient.connect(temporal_address, namespace=namespace,
                                          data_converter=pydantic_data_converter)
    async with contextlib.AsyncExitStack() as stack:
        for agent in agents:
            await stack.enter_async_context(tool_worker(client, agent))
        if ready is not None:
            ready.set()
        await asyncio.Event().wait()


def serve_blocking(*agents: Agent, **kwargs: object) -> None:
    """`serve` for scripts: blocks until Ctrl-C."""
    try:
        asyncio.run(serve(*agents, **kwargs))  # type: ignore[arg-type]
    except KeyboardInterrupt:
        pass


def tool_worker(client: TemporalClient, agent: Agent, max_concurrent: int = 100) -> Worker:
    return Worker(client, task_queue=agent.spec().task_queue, activities=[ToolRunner(agent).run_tool],
                  max_concurrent_activities=max_concurrent)


async def register_agents(agents: Sequence[Agent], *, api_url: str | None, api_key: str | None) -> None:
    from ._client import Client

    client = Client(api_url or "http://127.0.0.1:8080", api_key=api_key)
    try:
        for agent in agents:
            await client.register(agent)
    finally:
        await client.aclose()

