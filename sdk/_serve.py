"""Serving an agent: its tools run in the author's own process, polled from its task queue.

Tools execute where their code, credentials and side effects live (the author's process),
not inside Berth; Berth's workflow only schedules them on `agent/<name>` with an
idempotency key, so a crash on either side neither loses nor repeats a finished call.
An agent's MCP servers are reached from here too, so their tools run the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from datetime import timedelta
from typing import Any

from opentelemetry import trace
from temporalio import activity
from temporalio.client import Client as TemporalClient
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.service import TLSConfig
from temporalio.worker import Worker

from . import _registering as registering
from ._agent import Agent
from ._client import API_KEY_ENV, Client
from ._mcp_server import IDLE_CLOSE_S, BerthAccess
from ._mcp_tools import McpToolbox
from ._spec import AgentSpec
from ._temporal_connection import temporal_connection
from ._tool import ToolArgumentError, ToolCallContext
from .secret_settings import secret_setting
from .wire.contracts import TOOL_ACTIVITY, ToolCallInput, ToolCallResult
from .wire.limits import MAX_TOOL_RESULT_CHARS

log = logging.getLogger("berth.tools")
# A stopping tool worker waits this long for the tool calls it runs to finish and be recorded before it cancels
# them: inside `berth up`'s and Kubernetes' usual grace before SIGKILL (10 s, 30 s).
TOOL_GRACE_S = 5.0


class ToolRunner:
    """The one activity an agent's queue serves: look up the tool (its own or an MCP server's), run, report."""

    def __init__(self, agent: Agent, mcp: McpToolbox | None = None) -> None:
        self.agent = agent
        self.mcp = mcp if mcp is not None else McpToolbox(())

    @activity.defn(name=TOOL_ACTIVITY)
    async def run_tool(self, call: ToolCallInput) -> ToolCallResult:
        tool = self.agent.tools.get(call.name)
        if tool is None and call.name not in self.mcp:
            available = ", ".join(sorted([*self.agent.tools, *self.mcp.names])) or "none"
            return ToolCallResult(
                call_id=call.call_id,
                ok=False,
                content=f"tool error: unknown tool {call.name!r}; available: {available}",
            )
        # The interceptor's span for this activity is current: an author's own spans in the tool become its children.
        trace.get_current_span().set_attributes(
            {
                "berth.tool": call.name,
                "berth.idempotency_key": call.idempotency_key,
                "berth.task_id": call.task_id,
                "berth.step": call.step,
            }
        )
        context = ToolCallContext(call.task_id, call.step, call.call_id, activity.info().attempt)
        try:
            content = await (tool.invoke(call.arguments, context) if tool is not None else self.mcp.call(call))
        except ToolArgumentError as exc:
            # The model's mistake, not a transient failure: retrying would send the same arguments.
            return ToolCallResult(call_id=call.call_id, ok=False, content=f"tool error: bad arguments: {exc}")
        except Exception as exc:
            log.warning("tool %s failed on %s: %s", call.name, call.idempotency_key, exc)
            raise ApplicationError(f"{type(exc).__name__}: {exc}", type=type(exc).__name__) from exc
        if len(content) > MAX_TOOL_RESULT_CHARS:
            content = content[:MAX_TOOL_RESULT_CHARS] + f"\n[truncated to {MAX_TOOL_RESULT_CHARS} characters]"
        return ToolCallResult(call_id=call.call_id, ok=True, content=content)


async def serve(
    *agents: Agent,
    temporal_address: str | None = None,
    namespace: str | None = None,
    temporal_api_key: str | None = None,
    tls: bool | TLSConfig | None = None,
    api_url: str | None = None,
    api_key: str | None = None,
    register: bool = True,
    ready: asyncio.Event | None = None,
) -> None:
    """Reach the agents' MCP servers, register the agents (with those servers' tools) through Berth's API with
    `api_key` (else BERTH_API_KEY, or the file BERTH_API_KEY_FILE names), then run their tools until cancelled. An MCP server that cannot be reached
    stops this before anything is registered.

    Temporal is reached as its own CLI reaches it: TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, the
    TEMPORAL_TLS_* paths or a TEMPORAL_PROFILE, each overridden by the argument of the same meaning
    (`_temporal_connection.py`); with none of them, `berth up`'s dev server on 127.0.0.1:7233."""
    if not agents:
        raise ValueError("serve() needs at least one Agent")
    api_key = api_key or secret_setting(API_KEY_ENV)
    api = Client(api_url, api_key=api_key)
    berth = BerthAccess(api.url, lambda task_id: api.task(task_id).token(), own_key=api_key)
    names = [agent.name for agent in agents] if register else []
    registering.begin(names)  # a submit in this process that races the registration waits for it
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(_release, names)  # serve() ended or gave up: whoever waits asks again (and is told why)
        stack.push_async_callback(api.aclose)
        toolboxes = [await stack.enter_async_context(mcp_toolbox(agent, berth)) for agent in agents]
        if register:
            for agent, toolbox in zip(agents, toolboxes):
                await api.register(registered_spec(agent, toolbox))
                registering.done(agent.name)
        connection = temporal_connection(temporal_address, namespace, temporal_api_key, tls)
        client = await TemporalClient.connect(
            **connection, data_converter=pydantic_data_converter, interceptors=[TracingInterceptor()]
        )
        for agent, toolbox in zip(agents, toolboxes):
            await stack.enter_async_context(tool_worker(client, agent, toolbox))
        if ready is not None:
            ready.set()
        await asyncio.Event().wait()


def _release(names: list[str]) -> None:
    for name in names:
        registering.done(name)


def serve_blocking(*agents: Agent, **kwargs: object) -> None:
    """`serve` for scripts and service managers: blocks until Ctrl-C or SIGTERM. Both cancel serve() the same
    way, so its workers shut down and its agents' registrations are released before this returns; a
    KeyboardInterrupt raised from a signal handler would instead land wherever the event loop happened to be,
    inside Temporal's worker too, and could leave its shutdown waiting."""
    try:
        asyncio.run(_serve_until_terminated(agents, kwargs))
    except KeyboardInterrupt:
        pass


async def _serve_until_terminated(agents: tuple[Agent, ...], kwargs: dict[str, Any]) -> None:
    loop = asyncio.get_running_loop()
    if main := asyncio.current_task():
        with contextlib.suppress(NotImplementedError, RuntimeError):  # no signals off the main thread or on Windows
            loop.add_signal_handler(signal.SIGTERM, main.cancel)
    try:
        await serve(*agents, **kwargs)  # serve() checks its own keywords
    except asyncio.CancelledError:
        return  # Ctrl-C (asyncio.run cancels this task) or SIGTERM: serve() has shut down, a clean stop
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGTERM)


def tool_worker(
    client: TemporalClient, agent: Agent, mcp: McpToolbox | None = None, max_concurrent: int = 100
) -> Worker:
    """The Temporal worker that runs `agent`'s tools, for a program that owns its Temporal client and its
    workers' lifetime (enter it as an async context): what serve() runs, without registering the agent.
    Asked to stop, it gives the tool calls in flight TOOL_GRACE_S to finish and be recorded (a call cut off
    is run again by its retry)."""
    return Worker(
        client,
        task_queue=agent.spec().task_queue,
        activities=[ToolRunner(agent, mcp).run_tool],
        max_concurrent_activities=max_concurrent,
        graceful_shutdown_timeout=timedelta(seconds=TOOL_GRACE_S),
    )


def mcp_toolbox(agent: Agent, berth: BerthAccess | None = None, idle_close_s: float = IDLE_CLOSE_S) -> McpToolbox:
    """The agent's MCP servers, to enter before registering it: entering finds their tools."""
    return McpToolbox(agent.spec().mcp_servers, native_tools=agent.tools, berth=berth, idle_close_s=idle_close_s)


def registered_spec(agent: Agent, mcp: McpToolbox) -> AgentSpec:
    """What the control plane registers: the agent's own tools then its MCP servers', versioned by that content."""
    spec = agent.spec()
    if not mcp.specs:
        return spec
    spec = AgentSpec.model_validate({**spec.model_dump(), "tools": [*spec.tools, *mcp.specs]})
    return spec.model_copy(update={"version": spec.content_version()})
