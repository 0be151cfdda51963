"""SIGKILL for one of a stack's processes at random moments, each kill after the last one's victim is back.

A `Victim` is what a test kills: the orchestrator worker, the tool worker, or a node agent with its replicas (its
machine gone). `Killer` waits until the workload has a task running, draws a pause from its seeded random.Random,
kills, and waits for `berth up` to restart the victim and for the new process to serve again before it draws the
next pause: every kill lands on a process that was doing its work, never on one still starting.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import signal
import subprocess
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import httpx
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from tests.system.conftest import Stack, wait_until

# How long a victim may take to be back: `berth up` restarts it after 1 s (tests.system.chaos_up); the rest is a
# Python process importing Berth and connecting on two busy cores, or a node found lost and joining again.
BACK_WITHIN_S = 180.0
# A kill waits at most this long for a task of the workload to be running (the test submits another round).
RUNNING_WITHIN_S = 120.0


class Victim(Protocol):
    name: str

    def has_work(self) -> bool:
        """A kill now would take work away (the workload having a task running is checked besides)."""
        ...

    def kill(self, rng: random.Random) -> int:
        """SIGKILL the victim; the pid killed."""
        ...

    def back(self, killed: int) -> bool:
        """A new process serves in the killed one's place."""
        ...


def _restarted(stack: Stack, child: str, killed: int) -> int | None:
    try:
        pid = stack.child_pid(child)
    except (OSError, ValueError):
        return None
    return pid if pid != killed else None


@dataclass
class OrchestratorWorker:
    """`berth up`'s worker: back when its /healthz answers 200 (it polls the control queue)."""

    stack: Stack
    name: str = "worker"

    def __post_init__(self) -> None:
        found = re.search(r"worker (http://[\d.]+:\d+)/metrics", self.stack.log_tail())
        assert found, f"berth up did not print the worker's port: {self.stack.log_tail()}"
        self.healthz = f"{found.group(1)}/healthz"

    def has_work(self) -> bool:
        return True  # every running task's workflow is the worker's

    def kill(self, rng: random.Random) -> int:
        pid = self.stack.child_pid("worker")
        os.kill(pid, signal.SIGKILL)
        return pid

    def back(self, killed: int) -> bool:
        if _restarted(self.stack, "worker", killed) is None:
            return False
        try:
            return httpx.get(self.healthz, timeout=5).status_code == 200
        except httpx.HTTPError:
            return False


@dataclass
class ToolWorker:
    """`berth up`'s tool worker: back when the new process polls every agent queue it serves (Temporal lists its
    pollers by identity, `<pid>@<host>` for a Python worker)."""

    stack: Stack
    queues: tuple[str, ...]
    name: str = "tools"

    def has_work(self) -> bool:
        return True  # tool calls are short: a kill lands between them as often as during one, both are moments

    def kill(self, rng: random.Random) -> int:
        pid = self.stack.child_pid("tools")
        os.kill(pid, signal.SIGKILL)
        return pid

    def back(self, killed: int) -> bool:
        pid = _restarted(self.stack, "tools", killed)
        return pid is not None and asyncio.run(self._polled_by(pid))

    async def _polled_by(self, pid: int) -> bool:
        client = await Client.connect(f"127.0.0.1:{self.stack.env['BERTH_TEMPORAL_PORT']}")
        for queue in self.queues:
            described = await client.workflow_service.describe_task_queue(
                DescribeTaskQueueRequest(
                    namespace="default",
                    task_queue=TaskQueue(name=queue),
                    task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
                )
            )
            if not any(p.identity.startswith(f"{pid}@") for p in described.pollers):
                return False
        return True


@dataclass
class NodeAgent:
    """A node of the fleet, its machine gone: the agent and its replicas killed, only while a step holds a lease.
    The node is drawn among those holding one (a lease may end between the look and the kill: then among all), so
    the kill takes work away. Back when a new agent runs and the node reports healthy again."""

    stack: Stack
    nodes: tuple[str, ...]
    leases_on: Callable[[], list[str]]
    name: str = "node"
    killed_nodes: list[str] = field(default_factory=list)

    def has_work(self) -> bool:
        return bool(self.leases_on())

    def kill(self, rng: random.Random) -> int:
        busy = sorted(set(self.leases_on()))
        node = rng.choice(busy or list(self.nodes))
        self.killed_nodes.append(node)
        pid = self.stack.child_pid(node)
        os.kill(pid, signal.SIGKILL)
        found = subprocess.run(["pgrep", "-f", f"node/{node}/replica-logs"], capture_output=True, text=True)
        for replica in found.stdout.split():
            try:
                os.kill(int(replica), signal.SIGKILL)
            except ProcessLookupError:
                pass
        return pid

    def back(self, killed: int) -> bool:
        node = self.killed_nodes[-1]
        if _restarted(self.stack, node, killed) is None:
            return False
        try:
            answer = self.stack.http.get(f"/v1/nodes/{node}", timeout=5)
        except httpx.HTTPError:
            return False
        return answer.status_code == 200 and answer.json()["status"] == "healthy"


@dataclass
class Kill:
    pid: int
    pause_s: float  # drawn: how long after the victim was last back
    running: Counter  # the statuses of the workload's tasks when it landed


class Killer(threading.Thread):
    """`count` kills of `victim`, each `gap_s`-drawn seconds after the last one's victim served again."""

    def __init__(
        self,
        victim: Victim,
        count: int,
        rng: random.Random,
        statuses: Callable[[], list[str]],
        gap_s: tuple[float, float],
    ) -> None:
        super().__init__(name=f"killer-{victim.name}", daemon=True)
        self.victim, self.count, self.rng, self.statuses, self.gap_s = victim, count, rng, statuses, gap_s
        self.kills: list[Kill] = []
        self.error: str | None = None
        self.stop = threading.Event()

    @property
    def killed_pids(self) -> set[int]:
        return {k.pid for k in self.kills}

    def run(self) -> None:
        try:
            while len(self.kills) < self.count and not self.stop.is_set():
                self._wait_for_running_work()
                pause = self.rng.uniform(*self.gap_s)
                if self.stop.wait(pause):
                    return
                self._wait_for_running_work()  # the round may have ended during the pause
                running = Counter(self.statuses())
                pid = self.victim.kill(self.rng)
                self.kills.append(Kill(pid, pause, running))
                wait_until(
                    lambda killed=pid: self.victim.back(killed), BACK_WITHIN_S, f"{self.victim.name} back after {pid}"
                )
        except Exception:
            self.error = traceback.format_exc()

    def _wait_for_running_work(self) -> None:
        deadline = time.monotonic() + RUNNING_WITHIN_S
        while not (self.statuses() and self.victim.has_work()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no task of the workload running for {RUNNING_WITHIN_S:.0f} s")
            self.stop.wait(0.2)
