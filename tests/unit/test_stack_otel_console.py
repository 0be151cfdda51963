"""`berth up --otel-console`: every process of the stack is told to print its spans, and only then."""

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
