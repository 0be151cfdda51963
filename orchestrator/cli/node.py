"""`berth node`: run this machine as a GPU node of the fleet (see `orchestrator.node.agent`).

Bad flags, a refused join token, an unreachable control plane and a revoked node end the command
with one `error: …` line and exit status 2, like every other `berth` refusal.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import shutil
import sys
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..config import BerthConfig

if TYPE_CHECKING:
    from ..engines.replicas import ReplicaEngine

T = TypeVar("T")

DEFAULT_CACHE_GIB = 200.0  # room for a 70B model's bf16 weights (~140 GB) plus a few small ones


class NodeSetupError(Exception):
    """A flag or the environment makes the node impossible to start; the message is the error line."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("node", help="the GPU node agent: join the fleet and run model replicas")
    p.add_argument("--node-id", required=True, help="this node's name in the fleet (letters, digits, - _ .)")
    p.add_argument(
        "--simulate",
        help='simulated GPUs instead of NVML, e.g. "2xH100-80GB,1xA100-40GB"; '
        '"1xCPU-16GB" is this host\'s CPU with 16 GiB for llama.cpp models',
    )
    p.add_argument("--datacenter", default="local")
    p.add_argument("--zone", default="local-1")
    p.add_argument("--capacity", choices=["spot", "on-demand"], default="on-demand")
    p.add_argument("--usd-per-hour", type=float, default=0.0, help="the whole node's price")
    p.add_argument("--label", action="append", default=[], metavar="K=V", help="a node label (repeatable)")
    p.add_argument("--cache-dir", help="weights cache and node secret (default <data-dir>/node/<node-id>)")
    p.add_argument("--cache-gib", type=float, default=DEFAULT_CACHE_GIB, help="weights cache size in GiB")
    p.add_argument(
        "--join-token",
        help="a per-node token from `berth nodes admit`, a pool token from `berth nodes pool-token create`,"
        " or the cluster join token (the node then waits for approval) (env BERTH_JOIN_TOKEN, or a file that"
        " BERTH_JOIN_TOKEN_FILE names)",
    )
    p.add_argument("--api", help="the control plane's URL (env BERTH_API_URL, default http://127.0.0.1:8080)")
    p.add_argument("--data-dir", help="state directory (env BERTH_DATA_DIR, default ./.berth)")
    p.add_argument(
        "--load-time-scale",
        type=float,
        default=1.0,
        help="multiplies simulated replicas' load time (0.01 turns 40 s into 0.4 s)",
    )
    p.add_argument("--heartbeat-s", type=float, default=5.0, help="seconds between heartbeats")
    p.add_argument("--metrics-port", type=int, default=0, help="serve Prometheus /metrics on this port (0: none)")
    p.add_argument("--host", help="the address the metrics port binds (env BERTH_HOST, default 127.0.0.1)")
    p.add_argument("--external-url", help="an OpenAI-compatible server that serves 'openai-compatible' models")
    p.add_argument(
        "--peer-port",
        type=int,
        help="serve this node's cached weights to its datacenter's nodes on this"
        " port (binds --host; 0: any free port; default: serve none)",
    )
    p.add_argument("--peer-limit-mb-s", type=float, help="at most this many MB/s to peers (default: no limit)")
    p.add_argument(
        "--engines",
        help='the engines this node runs replicas with, e.g. "llama.cpp" (default: every'
        " one that can run here: simulated, llama.cpp once installed, vllm on PATH, ...)",
    )
    p.set_defaults(func=cmd_node)


def _labels(pairs: list[str]) -> dict[str, str]:
    labels = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise NodeSetupError(f"label: expected K=V, got {pair!r}")
        labels[key] = value
    return labels


def cmd_node(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_run(args))
    except NodeSetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0


async def _run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from ..engines.replicas import ExternalReplicaEngine, SglangReplicaEngine, SimulatedReplicaEngine, VllmReplicaEngine
    from ..engines.replicas.processes import stop_orphans
    from ..node import GpuDiscovery, NvmlDiscovery, NvmlUnavailable, SimulatedDiscovery, WeightsCache, parse_simulate
    from ..node.agent import NodeAgent, NodeOptions
    from ..node.control_plane import ControlPlane, ControlPlaneError
    from ..node.peer_fetch import fill_from_peers
    from ..node.replicas import ReplicaManager
    from ..node.transfers import TransferLog
    from ..node.weights_fill import FillReport, fill_from_origin
    from ..telemetry import install_metrics
    from ..telemetry.tracing import configure_tracing
    from ..temporal import connect_temporal
    from ..weights.files import Revision
    from ..weights.floor import MIB, TransferFloor
    from ..weights_transfer import DATACENTER_BYTES_PER_S, ORIGIN_BYTES_PER_S

    configure_tracing("berth-node")
    config = BerthConfig.load(data_dir=args.data_dir, join_token=args.join_token, api_url=args.api, host=args.host)
    if not config.join_token:
        raise NodeSetupError(
            "join-token: give --join-token or set BERTH_JOIN_TOKEN (or BERTH_JOIN_TOKEN_FILE) "
            "(`berth nodes admit NODE_ID`, or the control plane's <data_dir>/join-token)"
        )
    if args.heartbeat_s <= 0:
        raise NodeSetupError(f"heartbeat-s: must be > 0, got {args.heartbeat_s}")
    if args.load_time_scale < 0:
        raise NodeSetupError(f"load-time-scale: must be >= 0, got {args.load_time_scale}")
    if args.cache_gib <= 0:
        raise NodeSetupError(f"cache-gib: must be > 0, got {args.cache_gib}")
    discovery: GpuDiscovery
    if args.simulate:
        try:
            discovery = SimulatedDiscovery(parse_simulate(args.simulate), args.node_id)
        except ValueError as exc:
            raise NodeSetupError(f"simulate: {exc}") from None
    else:
        discovery = NvmlDiscovery()
    try:
        discovery.discover()
    except NvmlUnavailable as exc:
        raise NodeSetupError(str(exc)) from None

    cache_dir = Path(args.cache_dir) if args.cache_dir else config.data_dir / "node" / args.node_id
    cache = WeightsCache(cache_dir / "cache", round(args.cache_gib * 2**30))
    log_dir = cache_dir / "replica-logs"
    if orphans := stop_orphans(log_dir):
        print(
            f"stopped {len(orphans)} replica process(es) an earlier agent on this node left running:"
            f" {', '.join(map(str, orphans))}",
            file=sys.stderr,
        )
    engines = {
        "simulated": SimulatedReplicaEngine(
            load_time_scale=args.load_time_scale, latency_scale=config.engine_latency_scale, log_dir=log_dir
        ),
        "vllm": VllmReplicaEngine(log_dir=log_dir),
        "sglang": SglangReplicaEngine(python=sys.executable, log_dir=log_dir),
        "llama.cpp": llamacpp_engine(log_dir),
    }
    if args.external_url:
        try:
            engines["openai-compatible"] = ExternalReplicaEngine(args.external_url)
        except ValueError as exc:
            raise NodeSetupError(f"external-{exc}") from None
    stated = _engines(args.engines, engines)
    engines = {kind: engine for kind, engine in engines.items() if kind in stated}
    rates = {"datacenter": DATACENTER_BYTES_PER_S, "origin": ORIGIN_BYTES_PER_S}
    if args.peer_port is not None and not 0 <= args.peer_port <= 65535:
        raise NodeSetupError(f"peer-port: must be within 0..65535, got {args.peer_port}")
    if args.peer_limit_mb_s is not None and not 0 < args.peer_limit_mb_s <= 1e6:
        raise NodeSetupError(f"peer-limit-mb-s: must be > 0 (and at most 10^6), got {args.peer_limit_mb_s}")
    transfers = TransferLog()
    agent: NodeAgent | None = None
    floor = TransferFloor(config.weights_floor_mib_s * MIB, config.weights_floor_window_s)

    async def from_peers(
        cache: WeightsCache,
        revision: Revision,
        *,
        stop: threading.Event | None = None,
        on_bytes: Callable[[int], None] | None = None,
    ) -> FillReport:
        assert agent is not None, "a load runs only once the agent serves"
        return await fill_from_peers(cache, revision, agent.peer_tickets, stop=stop, on_bytes=on_bytes, floor=floor)

    async def from_origin(
        cache: WeightsCache, revision: Revision, *, stop: threading.Event, on_bytes: Callable[[int], None] | None = None
    ) -> FillReport:
        return await fill_from_origin(cache, revision, stop=stop, on_bytes=on_bytes, floor=floor)

    replicas = ReplicaManager(
        cache,
        engines,
        gpu_indexes={g.index for g in discovery.discover()},
        fetch_delay_s=lambda tier, size: size / rates[tier] * args.load_time_scale,
        sources={"datacenter": from_peers, "origin": from_origin},
        on_fill=transfers.record,
    )
    try:
        install_metrics("berth-node")
        options = NodeOptions(
            node_id=args.node_id,
            join_token=config.join_token,
            cache_dir=cache_dir,
            datacenter=args.datacenter,
            zone=args.zone,
            capacity=args.capacity,
            usd_per_hour=args.usd_per_hour,
            labels=_labels(args.label),
            heartbeat_s=args.heartbeat_s,
            metrics_port=args.metrics_port,
            metrics_host=config.host,
            engines=stated,
            peer_port=args.peer_port,
            peer_limit_bytes_per_s=args.peer_limit_mb_s * 1e6 if args.peer_limit_mb_s else None,
        )
        async with ControlPlane(config.resolved_api_url) as control_plane:
            agent = NodeAgent(options, discovery, control_plane, replicas, transfers)
            agent.install_signal_handlers()
            agent.start_probes()  # /healthz answers, and /readyz says why not, while Temporal and the join wait
            try:
                # Temporal first: the node's worker polls before it joins (NodeAgent.serve). A SIGTERM while it
                # is still awaited ends the wait at once, as it ends everything else the node does.
                temporal = await _unless_stopped(agent.stopping, connect_temporal(config))
            except ConnectionError as exc:  # Temporal never answered
                print(f"error: temporal: {exc}", file=sys.stderr)
                return 1
            if temporal is None:
                return 0
            try:
                await agent.serve(temporal)  # returns at once when told to stop before the control plane answered
            except ControlPlaneError as exc:  # the join was refused or never answered, or the node was revoked
                raise NodeSetupError(str(exc)) from None
            except ValidationError as exc:
                first = exc.errors()[0]
                raise NodeSetupError(f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None
    finally:
        close = getattr(discovery, "close", None)
        if close is not None:
            close()
    return 0


def _engines(flag: str | None, built: dict[str, ReplicaEngine]) -> list[str]:
    """The engines the node registers: those named by --engines (each one must be able to run here), or every
    one that can. Placement sends a node only models of its engines, so a node that names an engine it cannot
    run would only fail its loads."""
    from typing import get_args

    from sdk.wire.catalogue import EngineKind

    from ..engines.replicas.unavailable import UnavailableReplicaEngine
    from ..engines.replicas.vllm import VllmReplicaEngine

    def why_not(kind: str) -> str | None:
        engine = built.get(kind)
        if engine is None:
            return "it needs --external-url" if kind == "openai-compatible" else "this node has no such engine"
        if isinstance(engine, UnavailableReplicaEngine):
            return engine.reason
        if isinstance(engine, VllmReplicaEngine) and shutil.which(engine.executable) is None:
            return f"{engine.executable!r} is not on PATH"
        if kind == "sglang" and importlib.util.find_spec("sglang") is None:
            return "the sglang package is not installed beside this node"
        return None

    if flag is None:
        return [kind for kind in built if why_not(kind) is None]
    named = [part.strip() for part in flag.split(",") if part.strip()]
    if not named:
        raise NodeSetupError("engines: name at least one engine")
    for kind in named:
        if kind not in get_args(EngineKind):
            raise NodeSetupError(f"engines: {kind!r} is not an engine; engines are {', '.join(get_args(EngineKind))}")
        if (reason := why_not(kind)) is not None:
            raise NodeSetupError(f"engines: {kind!r} cannot run here: {reason}")
    return list(dict.fromkeys(named))


def llamacpp_engine(log_dir: Path) -> ReplicaEngine:
    """The llama.cpp engine when llama-cpp-python loads here; else one that refuses its loads saying why."""
    from ..engines.llamacpp import available
    from ..engines.replicas import LlamaCppReplicaEngine
    from ..engines.replicas.unavailable import UnavailableReplicaEngine

    missing = available()
    if missing is not None:
        return UnavailableReplicaEngine("llama.cpp", missing)
    return LlamaCppReplicaEngine(log_dir=log_dir)


async def _unless_stopped(stopping: asyncio.Event, wait: Coroutine[Any, Any, T]) -> T | None:
    """What `wait` returns, or None as soon as `stopping` is set first (`wait` is then cancelled)."""
    waiting, stopped = asyncio.ensure_future(wait), asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait({waiting, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if not waiting.done():
        waiting.cancel()
        return None
    return waiting.result()
