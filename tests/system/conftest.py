"""System tests: `berth up` as a real process tree on free loopback ports in a temp dir."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import httpx
import pytest

from orchestrator.engines.simulated.usage import UsageTally
from tests.conftest import ROOT, free_port
from tests.replay_check import assert_namespace_replays

AGENTS = "orchestrator.demo.sample_agents:ALL"
# Every stack runs with provider credentials set, as a real deployment would; test_secrets checks
# that none of them shows up in a log, a workflow history, an API answer or a page.
PROVIDER_CANARIES = {"OPENAI_API_KEY": "sk-canary-0penai-7f3a9c2e5b", "ANTHROPIC_API_KEY": "sk-ant-canary-4d1e8b6a0c"}
T = TypeVar("T")


@dataclass
class Stack:
    """One `berth up` with its data dir, ports and the tool journal the sample agents write."""

    data_dir: Path
    env: dict[str, str]
    process: subprocess.Popen | None = None
    up_args: tuple[str, ...] = ()
    agents: str = AGENTS  # what `berth up --agents` serves (module:attr, comma separated)
    up_module: str = "orchestrator.cli.main"  # the module run as `berth` (a test's launcher may wrap it)
    _http: httpx.Client | None = None
    replayed: int = 0  # histories replayed at this stack's stops

    @classmethod
    def create(cls, tmp: Path, latency_scale: float = 0.3, load_time_scale: float = 0.02) -> Stack:
        ports = {name: free_port() for name in ("API", "TEMPORAL", "TEMPORAL_UI", "TEMPORAL_METRICS", "ENGINE")}
        env = {
            **os.environ,
            "BERTH_DATA_DIR": str(tmp / "berth"),
            "BERTH_TOOL_JOURNAL": str(tmp / "journal.txt"),
            "BERTH_ENGINE_LATENCY_SCALE": str(latency_scale),
            "BERTH_LOAD_TIME_SCALE": str(load_time_scale),
            "PYTHONUNBUFFERED": "1",
            **PROVIDER_CANARIES,
            **{f"BERTH_{name}_PORT": str(port) for name, port in ports.items()},
        }
        env["BERTH_API_URL"] = f"http://127.0.0.1:{ports['API']}"
        return cls(tmp / "berth", env)

    @property
    def api(self) -> str:
        return self.env["BERTH_API_URL"]

    @property
    def http(self) -> httpx.Client:
        """An httpx client of the API with the stack's admin key (`berth up` wrote it to <data_dir>/admin-key)."""
        if self._http is None:
            self._http = httpx.Client(base_url=self.api, headers={"authorization": f"Bearer {self.admin_key()}"})
        return self._http

    def admin_key(self) -> str:
        return (self.data_dir / "admin-key").read_text().strip()

    def _adopt_admin_key(self) -> bool:
        """Once `berth up` has written its admin key: hand it to the subprocesses tests start (CLI, SDK)."""
        if not (self.data_dir / "admin-key").exists():
            return False
        self.env["BERTH_API_KEY"] = self.admin_key()
        return True

    def start(self, timeout_s: float = 120) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.data_dir.parent / "up.log", "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", self.up_module, "up", "--agents", self.agents, *self.up_args],
            env=self.env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"berth up exited: {self.log_tail()}"
            try:
                if not self._adopt_admin_key():
                    raise ValueError("no admin key yet")
                names = {a["name"] for a in self.http.get("/v1/agents", timeout=2).json()}
                if {"research", "coordinator"} <= names and self.http.get("/readyz").status_code == 200:
                    return
            except (httpx.HTTPError, ValueError, TypeError):
                pass
            time.sleep(0.5)
        raise TimeoutError(f"stack not ready: {self.log_tail()}")

    def stop(self, replay: bool = True) -> None:
        """Stop the stack (SIGTERM, as an operator would), after checking that every history its Temporal holds
        replays on the code under test (the gate of tests/replay_check.py): a failure fails the test."""
        if self.process is not None and self.process.poll() is None:
            if replay:
                address = f"127.0.0.1:{self.env['BERTH_TEMPORAL_PORT']}"
                self.replayed += assert_namespace_replays(address, f"stack {self.data_dir.parent.name}")
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def child_pid(self, name: str) -> int:
        return int((self.data_dir / "run" / f"{name}.pid").read_text())

    def log_tail(self, name: str = "up") -> str:
        path = self.data_dir.parent / "up.log" if name == "up" else self.data_dir / "logs" / f"{name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def tool_runs(self) -> Counter:
        journal = Path(self.env["BERTH_TOOL_JOURNAL"])
        lines = journal.read_text().splitlines() if journal.exists() else []
        return Counter(line.split()[0] for line in lines)

    def engine_usage(self, task_id: str) -> dict:
        """What the fleet's simulated replicas served for a task, from their usage journals (all of them,
        including replicas unloaded since and nodes restarted since)."""
        total: Counter = Counter()
        for journal in sorted(self.data_dir.glob("node/*/replica-logs/*.usage.jsonl")):
            total.update(UsageTally(journal).snapshot()["by_task"].get(task_id, {}))
        return dict(total)

    def wait_for_step(self, task_id: str, step: int, timeout_s: float = 60) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = self.http.get(f"/v1/tasks/{task_id}").json()
            if state.get("step", 0) >= step:
                return state
            time.sleep(0.2)
        raise TimeoutError(f"task {task_id} never reached step {step}")


@pytest.fixture(scope="package")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One plain `berth up` for every system test that needs no fleet of its own: a start costs ~15 s on two
    cores, a stop ~5 s. Tests use task ids of their own."""
    s = Stack.create(tmp_path_factory.mktemp("stack"))
    s.start()
    try:
        yield s
    finally:
        s.stop()


def wait_until(check: Callable[[], T], timeout_s: float, what: str) -> T:
    """The check's first truthy answer, asked every 0.2 s."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if answer := check():
            return answer
        time.sleep(0.2)
    raise TimeoutError(f"waited {timeout_s:.0f}s for {what}")


@contextlib.contextmanager
def fleet_stack(
    tmp: Path,
    fleet: list[dict],
    env: dict[str, str] | None = None,
    *,
    agents: str = AGENTS,
    up_module: str = "orchestrator.cli.main",
    **create: float,
) -> Iterator[Stack]:
    """`berth up` with the simulated nodes of `fleet` (its fleet file), once every node is healthy."""
    (tmp / "fleet.json").write_text(json.dumps(fleet))
    stack = Stack.create(tmp, **create)
    stack.env.update(env or {})
    stack.agents, stack.up_module = agents, up_module
    stack.up_args = ("--fleet", str(tmp / "fleet.json"))
    stack.start()
    try:
        wait_for_healthy_nodes(stack, len(fleet))
        yield stack
    finally:
        stack.stop()


def wait_for_healthy_nodes(stack: Stack, count: int) -> None:
    """Until `count` nodes have joined and report healthy (steps and the Fleet page need them)."""
    wait_until(
        lambda: len(stack.http.get("/v1/nodes", params={"status": "healthy"}).json()) == count,
        60,
        f"{count} healthy nodes",
    )
