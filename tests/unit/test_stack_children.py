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
