"""What `berth up` starts: `--otel-console` tells every process to print its spans (and only then); the worker
and each node get a /metrics port of their own."""

from __future__ import annotations

from pathlib import Path

from orchestrator.cli.main import build_parser
from orchestrator.config import BerthConfig
from orchestrator.stack.up import stack_children
from orchestrator.telemetry.tracing import CONSOLE_ENV


def test_the_flag_reaches_every_child(tmp_path: Path) -> None:
    config = BerthConfig(data_dir=tmp_path)
    assert build_parser().parse_args(["up", "--otel-console"]).otel_console is True
    assert build_parser().parse_args(["up"]).otel_console is False
    printing = stack_children(config, ["agents:ALL"], otel_console=True)
    assert {c.name for c in printing} >= {"server", "worker", "tools"}
    assert all(c.env[CONSOLE_ENV] == "1" for c in printing)
    assert not any(CONSOLE_ENV in c.env for c in stack_children(config, ["agents:ALL"]))


def test_berth_up_gives_the_worker_and_each_node_a_metrics_port_of_its_own(tmp_path: Path) -> None:
    from orchestrator.stack.fleet import DEFAULT_FLEET
    from orchestrator.stack.up import metrics_ports
    from orchestrator.worker import WORKER_METRICS_PORT_ENV

    config = BerthConfig(data_dir=tmp_path, fleet=True)
    ports = metrics_ports("127.0.0.1", DEFAULT_FLEET)
    assert set(ports) == {"worker", *(n.node_id for n in DEFAULT_FLEET)} and len(set(ports.values())) == len(ports)
    children = {c.name: c for c in stack_children(config, [], DEFAULT_FLEET, metrics=ports)}
    assert children["worker"].env[WORKER_METRICS_PORT_ENV] == str(ports["worker"])
    for node in DEFAULT_FLEET:
        argv = children[node.node_id].argv
        assert argv[argv.index("--metrics-port") + 1] == str(ports[node.node_id])


def test_metrics_ports_lie_outside_the_ephemeral_range_so_no_bind_to_port_0_takes_one_meanwhile() -> None:
    """A node binds its metrics port only after joining; a port below the kernel's ephemeral range is never the
    one an engine's bind to port 0 gets in between, which kept a node in a crash loop for a whole stack."""
    import socket

    from orchestrator.stack.fleet import DEFAULT_FLEET
    from orchestrator.stack.up import FIXED_PORT_FLOOR, _ephemeral_low, metrics_ports

    ports = metrics_ports("127.0.0.1", DEFAULT_FLEET)
    assert all(FIXED_PORT_FLOOR <= port < _ephemeral_low() for port in ports.values())
    kernel_picks = []
    for _ in range(50):  # the ports the kernel hands out to binds to 0 now
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            kernel_picks.append(s.getsockname()[1])
    assert not set(kernel_picks) & set(ports.values())


def test_berth_up_admits_its_own_nodes_and_leaves_the_cluster_token_to_the_others(tmp_path: Path) -> None:
    """Each stack node the store has not seen joins with a per-node token of its own; one that joined before
    rejoins with its secret, so it gets none (it keeps the cluster token, which alone would leave it pending)."""
    from orchestrator.stack.fleet import DEFAULT_FLEET
    from orchestrator.stack.up import JOIN_TOKEN_ENV, admit_stack_nodes
    from orchestrator.store import Store
    from sdk.wire.fleet import NodeSpec

    config = BerthConfig(
        data_dir=tmp_path, fleet=True, join_token="cluster", database_url=f"sqlite:///{tmp_path / 'berth.db'}"
    )
    store = Store.open(config.resolved_database_url)
    try:
        known = DEFAULT_FLEET[0]
        store.fleet.register(NodeSpec(node_id=known.node_id, datacenter=known.datacenter, zone=known.zone), "s")
        tokens = admit_stack_nodes(store, DEFAULT_FLEET)
        assert set(tokens) == {n.node_id for n in DEFAULT_FLEET[1:]}
        for node in DEFAULT_FLEET[1:]:
            joined = store.node_admission.join(
                NodeSpec(node_id=node.node_id, datacenter=node.datacenter, zone=node.zone),
                None,
                tokens[node.node_id],
                cluster_token=False,
            )
            assert joined.node.status == "healthy"
    finally:
        store.close()
    children = {c.name: c for c in stack_children(config, [], DEFAULT_FLEET, node_tokens=tokens)}
    assert children[known.node_id].env[JOIN_TOKEN_ENV] == "cluster"
    assert all(children[n].env[JOIN_TOKEN_ENV] == tokens[n] for n in tokens)
    assert children["server"].env[JOIN_TOKEN_ENV] == "cluster"  # the server checks the cluster token


def test_the_default_fleet_runs_simulated_gpus_and_the_real_model_on_this_cpu() -> None:
    from orchestrator.stack.fleet import DEFAULT_FLEET, SimulatedNode, node_argv

    runs = {node.node_id: node.runs for node in DEFAULT_FLEET}
    assert runs["cpu-local"] == ["llama.cpp"] and all(r == ["simulated"] for n, r in runs.items() if n != "cpu-local")
    argv = node_argv(next(n for n in DEFAULT_FLEET if n.on_cpu), 0.1, 2.0)
    assert argv[argv.index("--engines") + 1] == "llama.cpp" and argv[argv.index("--simulate") + 1] == "1xCPU-16GB"
    stated = SimulatedNode(node_id="gpu-x", datacenter="d", zone="z", gpus="1xH100-80GB", engines=["simulated", "vllm"])
    argv = node_argv(stated, 1.0, 2.0)
    assert argv[argv.index("--engines") + 1] == "simulated,vllm" and argv[argv.index("--peer-port") + 1] == "0"
