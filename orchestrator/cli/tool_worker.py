"""`berth worker --agents module:attr`: serve the tools of agents defined in Python modules."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import signal
import sys
from collections.abc import Awaitable, Callable

from sdk import Agent, BerthError, InvalidSpec, McpUnreachable, SecretSettingRefused, serve
from sdk.secret_settings import secret_setting
from sdk.wire.identity import API_KEY_ENV

from ..config import BerthConfig
from ..telemetry import serve_metrics
from ..telemetry.tracing import configure_tracing
from ..temporal import TemporalSettingsRefused, temporal_connect_options
from .output import fail

# The orchestrator worker's variable (orchestrator/worker.py, which this process does not load): one name for a
# worker's probe port, whichever worker it is.
WORKER_METRICS_PORT_ENV = "BERTH_WORKER_METRICS_PORT"


class AgentRefError(ValueError):
    """A malformed or unresolvable `module:attr` reference."""


def load_agents(ref: str) -> list[Agent]:
    """`pkg.module:attr` where attr is an Agent or a list of Agents."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise AgentRefError(f"agents: {ref!r} is not of the form module:attr")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AgentRefError(f"agents: cannot import {module_name!r}: {exc}") from exc
    value = getattr(module, attr, None)
    if value is None:
        raise AgentRefError(f"agents: {module_name!r} has no attribute {attr!r}")
    found = value if isinstance(value, (list, tuple)) else [value]
    if not found or not all(isinstance(a, Agent) for a in found):
        raise AgentRefError(f"agents: {ref!r} is not an Agent or a list of Agents")
    return list(found)


def run_tool_worker(config: BerthConfig, refs: list[str]) -> int:
    try:
        agents = [agent for ref in refs for agent in load_agents(ref)]
    except AgentRefError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        credentials = temporal_connect_options(config)
        # Read here, not at its first use: a key that cannot be read stops the worker before it serves probes.
        api_key = secret_setting(API_KEY_ENV)
    except (TemporalSettingsRefused, SecretSettingRefused) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    configure_tracing("berth-tools")
    # The probes a container platform needs (the orchestrator worker's variable and its port's paths): /healthz
    # while the process answers, /readyz once its agents are registered and their tools served.
    registered = asyncio.Event()
    probes = serve_metrics(
        int(os.environ.get(WORKER_METRICS_PORT_ENV) or 0),
        ready=lambda: None if registered.is_set() else "registering its agents and connecting to Temporal",
        host=config.host,
    )

    def start() -> Awaitable[None]:
        # Berth's own settings when given; otherwise serve() reads Temporal's (TEMPORAL_API_KEY, TEMPORAL_TLS_*).
        return serve(
            *agents,
            temporal_address=config.resolved_temporal_address,
            namespace=config.temporal_namespace,
            api_url=config.resolved_api_url,
            api_key=api_key,
            temporal_api_key=credentials.get("api_key"),
            # False only when BERTH_TEMPORAL_TLS says so: unset, serve() may still take TLS from TEMPORAL_TLS_*.
            tls=None if config.temporal_tls is None and credentials["tls"] is False else credentials["tls"],
            ready=registered,
        )

    try:
        asyncio.run(_until_terminated(start))
    except KeyboardInterrupt:
        pass
    except (InvalidSpec, McpUnreachable) as exc:
        return fail(exc.message, exc.field)
    finally:
        if probes is not None:
            probes.close()
    return 0


async def _until_terminated(start: Callable[[], Awaitable[None]]) -> None:
    """Serve until Ctrl-C or SIGTERM, both of which cancel serve() so its workers shut down and let the tool
    calls in flight finish and be recorded. Python's default SIGTERM ended the process on the spot: under
    `berth up` a restart then ran again a tool call that had already run (its result never reached Temporal)."""
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    if main is not None:
        with contextlib.suppress(NotImplementedError, RuntimeError):  # no signals off the main thread or on Windows
            loop.add_signal_handler(signal.SIGTERM, main.cancel)
    try:
        await _with_retry(start)
    except asyncio.CancelledError:
        return


async def _with_retry(start: Callable[[], Awaitable[None]], attempts: int = 60) -> None:
    """The control plane may still be starting under `berth up`: retry registration for a while."""
    for attempt in range(attempts):
        try:
            await start()
            return
        except (InvalidSpec, McpUnreachable):
            raise  # the agent's own declaration or MCP server, not the control plane: waiting changes nothing
        except (ConnectionError, OSError, RuntimeError, BerthError) as exc:
            if attempt == attempts - 1:
                raise
            print(f"waiting for the control plane ({exc})", file=sys.stderr)
            await asyncio.sleep(1)
