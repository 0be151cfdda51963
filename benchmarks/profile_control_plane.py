"""Where the stack's CPU goes per step under the load run's burst: CPU-seconds per step of each process, and
(with --profile) py-spy's view of where inside the API server, the worker and a node agent it goes.

The stack, the model's settings and the burst are the load run's (benchmarks/load_run.py: two simulated
nodes, N `research` tasks submitted at once, three steps each); its baseline and its checks are not run.
Over the burst, from the first submit to the last task final, a sampler reads utime + stime of every
process under `berth up` from /proc/<pid>/stat every SAMPLE_S and keeps each one's last reading, so a
replica that exits before the end still counts what it used. A process's CPU over the burst, divided by
the steps the tasks took, is its CPU per step. Processes are grouped by role from their command line:
the API server, the worker, each node agent, the replicas (the nodes' engine children), the tool worker,
Temporal, and this benchmark's own client (which submits and polls). Some of a process's CPU comes with
time, not with steps (node heartbeats every 2 s, the autoscaler's ticks): the same sampler first reads the
idle stack for IDLE_S, and each role's idle rate times the burst's wall time is given apart, with the CPU
per step net of it. On a shared machine a slower burst pays more of that background per step.

With --profile, `py-spy record --nonblocking --gil` samples the server, the worker and the first node over the
same span (raw stacks, under <tmp>/profiles); the figures keep each one's top functions by samples spent
in them (self) and, for Berth's own code, with what they call (inclusive). py-spy's sampling runs in its
own processes, which are not counted; on two cores it still takes CPU the stack would otherwise have.

The figures of each run are kept under its --label in benchmarks/results/profile_control_plane.json, so a
"before" and an "after" sit side by side.

    python -m benchmarks.profile_control_plane --label after [--tasks 1000] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

from sdk import BerthError, Budget, Client
from sdk.wire.identity import TenantSpec
from tests.system.conftest import Stack, fleet_stack, wait_until

from ._results import write_labelled_run
from .load_run import (
    AGENT,
    BUDGET_TOKENS,
    CLIENT_TIMEOUT_S,
    FLEET,
    LOAD_DEADLINE_S,
    MAX_NUM_SEQS,
    MODEL,
    POLICY,
    TASKS,
    subject,
    wait_final,
)

NAME = "profile_control_plane"
SAMPLE_S = 2.0
IDLE_S = 60.0  # 30 node heartbeats each (every 2 s under `berth up`), 30 autoscaler ticks
# A submit whose workflow start passed the API's 30 s limit (a 2-core machine that another stack shares) is sent
# again: a submit is idempotent by task id. The retries are counted in the figures.
SUBMIT_ATTEMPTS = 6
TICKS_PER_S = os.sysconf("SC_CLK_TCK")
# 1 sample per 50 ms: ~6,000 samples a process over a five-minute burst. At 50 Hz on three processes the
# samplers' own CPU, on two cores, slowed Temporal enough that starts of the 1,000-task burst passed the
# API's 30 s limit.
PYSPY_RATE_HZ = 20
PROFILED = ("api", "worker", f"node {FLEET[0]['node_id']}")
TOP = 12
OWN_CODE = ("orchestrator/", "activities/", "workflows/", "sdk/")


def role(argv: list[str], parent_role: str | None) -> str:
    """What a process under `berth up` is, from its command line (and its parent's role, for replicas)."""
    line = " ".join(argv)
    if "orchestrator.cli.main server" in line:
        return "api"
    if "orchestrator.cli.main worker" in line:
        return "tools" if "--agents" in line else "worker"
    if "orchestrator.cli.main node" in line:
        return f"node {argv[argv.index('--node-id') + 1]}"
    if "orchestrator.engines.simulated" in line:
        return "replicas" if parent_role and parent_role.startswith("node") else "engine"
    if "temporal" in line and "start-dev" in line:
        return "temporal"
    if "orchestrator.cli.main up" in line:
        return "up"
    return "other"


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, utime + stime in ticks), or None for a process gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) ": state is field 3 of stat(5)
    return int(fields[1]), int(fields[11]) + int(fields[12])


def _argv(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


class CpuSampler:
    """Every process under `root`: its role and its CPU ticks at the start of the window and at the last reading."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.roles: dict[int, str] = {}
        self.first: dict[int, int] = {}
        self.last: dict[int, int] = {}
        self.other_stacks = 0  # the most API servers seen at once outside `root`: other stacks sharing the cores
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._read(start=True)
        self._thread.start()

    def stop(self) -> dict[str, float]:
        """CPU-seconds per role over the window."""
        self._stop.set()
        self._thread.join()
        self._read(start=False)
        by_role: Counter = Counter()
        for pid, ticks in self.last.items():
            by_role[self.roles[pid]] += (ticks - self.first.get(pid, 0)) / TICKS_PER_S
        return dict(by_role)

    def pids(self, wanted: str) -> list[int]:
        return [pid for pid, r in self.roles.items() if r == wanted]

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self._read(start=False)

    def _read(self, start: bool) -> None:
        stats = {pid: s for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()) if (s := _stat(pid))}
        tree = {self.root}
        grew = True
        while grew:  # descendants of root: parents before children
            found = {pid for pid, (ppid, _) in stats.items() if ppid in tree} - tree
            tree |= found
            grew = bool(found)
        self.other_stacks = max(
            self.other_stacks,
            sum("orchestrator.cli.main server" in " ".join(_argv(pid)) for pid in stats if pid not in tree),
        )
        for pid in sorted(tree):
            if pid not in self.roles:
                self.roles[pid] = role(_argv(pid), self.roles.get(stats[pid][0]))
                if start:  # there before the window: only what it uses from now on counts
                    self.first[pid] = stats[pid][1]
            self.last[pid] = stats[pid][1]


class PySpy:
    """`py-spy record` on one process until stopped; raw stacks, one line per distinct stack with its count."""

    def __init__(self, pid: int, out: Path) -> None:
        self.out = out
        executable = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        self.process = subprocess.Popen(
            [
                executable,
                "record",
                "--nonblocking",
                "--gil",  # only the thread holding the GIL: Python's own work, not threads waiting for it
                "--rate",
                str(PYSPY_RATE_HZ),
                "--format",
                "raw",
                "--output",
                str(out),
                "--pid",
                str(pid),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )

    def stop(self) -> dict:
        self.process.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        self.process.wait(60)
        return shares(self.out.read_text().splitlines()) if self.out.exists() else {}


def shares(lines: list[str]) -> dict:
    """The top functions of a raw py-spy profile: by samples they were running in (self), and Berth's own
    functions by samples with them on the stack (inclusive), as shares of all samples."""
    own: Counter = Counter()
    inclusive: Counter = Counter()
    total = 0
    for line in lines:
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack:
            continue
        samples = int(count)
        total += samples
        frames = stack.split(";")
        own[frames[-1]] += samples
        for name in {f.split(":")[0] + ")" for f in frames if any(f" ({p}" in f for p in OWN_CODE)}:
            inclusive[name] += samples
    if not total:
        return {}
    return {
        "samples": total,
        "self": {f: round(n / total, 3) for f, n in own.most_common(TOP)},
        "own_code_inclusive": {f: round(n / total, 3) for f, n in inclusive.most_common(TOP * 2)},
    }


METRIC_LINE = re.compile(r"^(service_requests|persistence_requests)\{(.*)\} ([0-9.e+]+)$")
LABEL = re.compile(r'(\w+)="([^"]*)"')


def temporal_requests(metrics_url: str) -> Counter:
    """Temporal's own request counters: every RPC its frontend served (`rpc <Operation>`) and every write or read
    it made of its store (`db <Operation>`), as its Prometheus endpoint reports them now."""
    counts: Counter = Counter()
    for line in httpx.get(metrics_url, timeout=30).text.splitlines():
        match = METRIC_LINE.match(line)
        if match is None:
            continue
        labels = dict(LABEL.findall(match.group(2)))
        if match.group(1) == "service_requests" and labels.get("service_name") == "frontend":
            counts[f"rpc {labels.get('operation')}"] += float(match.group(3))
        elif match.group(1) == "persistence_requests":
            counts[f"db {labels.get('operation')}"] += float(match.group(3))
    return counts


async def set_up(client: Client, stack: Stack) -> None:
    """As the load run sets its stack up: the model at MAX_NUM_SEQS under POLICY, the burst's tenant, a warm replica."""
    entry = (await client.model(MODEL)).entry
    await client.put_model(
        entry.model_copy(update={"engine_args": {**entry.engine_args, "max_num_seqs": MAX_NUM_SEQS}})
    )
    await client.set_policy(MODEL, POLICY)
    await client.create_tenant(TenantSpec(name="load"))
    await asyncio.to_thread(
        wait_until,
        lambda: any(r["state"] == "warm" for r in stack.http.get("/v1/replicas", params={"model": MODEL}).json()),
        120,
        f"a warm replica of {MODEL}",
    )


async def submit_burst(client: Client, count: int) -> tuple[set[str], int]:
    """The load run's burst: `count` research tasks at once. Their ids, and how many submits were sent again."""
    retries = 0

    async def one(i: int) -> str:
        nonlocal retries
        for attempt in range(SUBMIT_ATTEMPTS):
            try:
                return (
                    await client.submit(
                        AGENT,
                        subject(i),
                        budget=Budget(tokens=BUDGET_TOKENS),
                        model=MODEL,
                        tenant="load",
                        task_id=f"load-{i:05d}",
                    )
                ).task_id
            except BerthError:
                if attempt == SUBMIT_ATTEMPTS - 1:
                    raise
                retries += 1
        raise AssertionError("unreachable")

    return set(await asyncio.gather(*(one(i) for i in range(count)))), retries


async def burst(stack: Stack, tasks: int, profile_dir: Path | None) -> dict:
    async with Client(stack.api, api_key=stack.admin_key(), timeout=CLIENT_TIMEOUT_S) as client:
        await set_up(client, stack)
        assert stack.process is not None
        idle = CpuSampler(stack.process.pid)
        idle.start()
        await asyncio.sleep(IDLE_S)
        idle_per_s = {r: s / IDLE_S for r, s in idle.stop().items()}
        sampler = CpuSampler(stack.process.pid)
        sampler.start()
        spies = {}
        if profile_dir is not None:
            profile_dir.mkdir(parents=True, exist_ok=True)
            spies = {r: PySpy(sampler.pids(r)[0], profile_dir / f"{r.replace(' ', '_')}.txt") for r in PROFILED}
        metrics_url = f"http://127.0.0.1:{stack.env['BERTH_TEMPORAL_METRICS_PORT']}/metrics"
        requests_before = await asyncio.to_thread(temporal_requests, metrics_url)
        client_cpu = time.process_time()
        t0 = time.time()
        sent, retries = await submit_burst(client, tasks)
        states = await wait_final(client, sent, LOAD_DEADLINE_S)
        wall = time.time() - t0
        client_cpu = time.process_time() - client_cpu
        cpu = sampler.stop()
        requests = await asyncio.to_thread(temporal_requests, metrics_url)
        requests.subtract(requests_before)
        profiles = {r: spy.stop() for r, spy in spies.items()}
    cpu["client"] = client_cpu
    steps = sum(s.step for s in states.values())
    return {
        "tasks": tasks,
        "steps": steps,
        "completed": sum(s.status.value == "completed" for s in states.values()),
        "interruptions": sum(s.interruptions for s in states.values()),
        "submits_sent_again": retries,
        "wall_s": round(wall, 1),
        "load_average_after": round(os.getloadavg()[0], 2),
        # Another benchmark's stack on the same two cores changes how busy every process is.
        "other_stacks_seen": sampler.other_stacks,
        "cpu_s": {r: round(s, 1) for r, s in sorted(cpu.items())},
        "cpu_ms_per_step": {r: round(1000 * s / steps, 2) for r, s in sorted(cpu.items())},
        "cpu_ms_per_step_total": round(1000 * sum(cpu.values()) / steps, 2),
        "idle_cpu_s_per_s": {r: round(v, 4) for r, v in sorted(idle_per_s.items())},
        "cpu_ms_per_step_net_of_idle": {
            r: round(1000 * (s - idle_per_s.get(r, 0.0) * wall) / steps, 2) for r, s in sorted(cpu.items())
        },
        # What the dev server's CPU per step is spent on: its RPCs and its store's operations, per step.
        "temporal_requests_per_step": {
            op: round(n / steps, 2) for op, n in requests.most_common() if n / steps >= 0.05
        },
        "profiles": profiles,
    }


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", required=True, help="the run's name in the results file (before, after, ...)")
    parser.add_argument("--tasks", type=int, default=TASKS, help=f"tasks submitted at once (default {TASKS})")
    parser.add_argument("--profile", action="store_true", help="sample the server, worker and first node with py-spy")
    parser.add_argument("--note", default="", help="what this run is of (the commit, the settings)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="berth-bench-profile-"))
    print(f"stack in {tmp}", flush=True)
    with fleet_stack(tmp, FLEET, latency_scale=1.0, load_time_scale=0.02) as stack:
        figures = asyncio.run(burst(stack, args.tasks, tmp / "profiles" if args.profile else None))
    figures["note"] = args.note
    print(json.dumps({k: v for k, v in figures.items() if k != "profiles"}, indent=1))
    print(f"figures written to {write_labelled_run(NAME, args.label, figures)}")
    return figures


if __name__ == "__main__":
    main()
