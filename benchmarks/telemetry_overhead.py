"""What telemetry adds to a step: the same agent tasks with telemetry off and exported over OTLP/HTTP.

OpenTelemetry allows one global TracerProvider and MeterProvider per process, so the two arms run
in two worker processes this benchmark starts, and the parent compares them:

- off: no tracing provider, no OTLP (Berth's default: the API's no-op spans, the Prometheus
  reader only);
- on: `configure_tracing` and `install_metrics` with OTEL_EXPORTER_OTLP_ENDPOINT pointing at a
  collector stand-in in the parent (a loopback HTTP server counting POST /v1/traces and
  /v1/metrics requests and bytes), with short export intervals so export happens during the run.

Both arms run the orchestrator worker and a tool worker (each its own agent, so its own tool
queue) on one Temporal dev server and one simulated engine (zero latency) started by the parent,
with the TracingInterceptor on their clients as in production. The parent asks the two children
for one task at a time, alternating which arm goes first, so machine noise hits both alike. A
sample is one task's wall time divided by its steps; p50/p95 are over those samples.

    python -m benchmarks.telemetry_overhead [--trials N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from temporalio.client import Client  # noqa: E402
from temporalio.contrib.pydantic import pydantic_data_converter  # noqa: E402
from temporalio.testing import WorkflowEnvironment  # noqa: E402

from orchestrator.config import BerthConfig  # noqa: E402
from orchestrator.store import Store  # noqa: E402
from orchestrator.telemetry import install_metrics  # noqa: E402
from orchestrator.telemetry.tracing import configure_tracing, tracing_interceptor  # noqa: E402
from orchestrator.worker import build_worker  # noqa: E402
from sdk import (
    Agent,  # noqa: E402
    tool_worker,  # noqa: E402
)

from ._results import write_results  # noqa: E402
from ._tasks import observe, run_task  # noqa: E402
from .step_overhead import _free_port, _wait  # noqa: E402

TOOL_STEPS = 9  # a task: 9 tool steps and the answer
TASKS_PER_TRIAL = 8  # per arm
ARMS = ("off", "on")
EXPORT_ENV = {"OTEL_BSP_SCHEDULE_DELAY": "200", "OTEL_METRIC_EXPORT_INTERVAL": "1000"}


class _Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP collector stand-in: counts requests and bytes per path, answers 200."""

    counts: dict[str, list[int]] = {}
    lock = threading.Lock()

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.lock:
            requests_bytes = self.counts.setdefault(self.path, [0, 0])
            requests_bytes[0] += 1
            requests_bytes[1] += len(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        """Silent: the benchmark's output is its figures."""


async def _child(arm: str, target: str, engine_url: str) -> None:
    """One arm's worker process: set telemetry up (or not), then run a task per "run" line on stdin and
    print its ms/step; "stop" ends it, so pending spans and metrics are flushed by the SDK's shutdown."""
    if arm == "on":
        assert configure_tracing("berth-bench")
        install_metrics("berth-bench")
    agent = Agent(
        f"bench-telemetry-{arm}",
        "llama-3.2-1b",
        "Observe each topic, then answer.",
        [observe],
        max_steps=TOOL_STEPS + 10,
        max_tokens_per_step=64,
    )
    tmp = Path(tempfile.mkdtemp(prefix=f"berth-bench-{arm}-"))
    config = BerthConfig(data_dir=tmp, engine_url=engine_url, database_url=f"sqlite:///{tmp / 'berth.db'}")
    store = Store.open(config.resolved_database_url)
    store.agents.register(agent.spec())
    client = await Client.connect(target, data_converter=pydantic_data_converter, interceptors=[tracing_interceptor()])
    queue = f"bench-telemetry-control-{arm}"
    async with build_worker(client, store, config, task_queue=queue), tool_worker(client, agent):
        await run_task(client, store, agent, queue, 3)  # warm-up: imports, tokenizer, connections
        print("ready", flush=True)
        while (await asyncio.to_thread(sys.stdin.readline)).strip() == "run":
            t0 = time.perf_counter()
            state = await run_task(client, store, agent, queue, TOOL_STEPS)
            print(json.dumps({"ms_per_step": 1000 * (time.perf_counter() - t0) / state.step}), flush=True)


def _spawn(arm: str, target: str, engine_url: str, collector: str) -> subprocess.Popen[str]:
    """Start one arm's worker process; the parent's own OTEL_* variables are dropped so "off" really is off."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if arm == "on":
        env |= {"OTEL_EXPORTER_OTLP_ENDPOINT": collector, **EXPORT_ENV}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchmarks.telemetry_overhead",
            "--arm",
            arm,
            "--target",
            target,
            "--engine-url",
            engine_url,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def _ask(child: subprocess.Popen[str], line: str) -> str:
    """Send a command and wait for its one-line answer, so only one arm runs a task at a time."""
    assert child.stdin and child.stdout
    child.stdin.write(line + "\n")
    child.stdin.flush()
    return child.stdout.readline()


def _pct(samples: list[float], q: float) -> float:
    """The nearest-rank percentile: a measured sample, not an interpolation between two."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def main(trials: int) -> dict:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    collector = f"http://127.0.0.1:{server.server_address[1]}"
    port = _free_port()
    engine = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.engines.simulated", "--port", str(port), "--latency-scale", "0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(Path(sys.executable).parent / "temporal"), data_converter=pydantic_data_converter
    )
    children: dict[str, subprocess.Popen[str]] = {}
    samples: dict[str, list[float]] = {arm: [] for arm in ARMS}
    try:
        await _wait(f"http://127.0.0.1:{port}/health")
        target = env.client.service_client.config.target_host
        children = {arm: _spawn(arm, target, f"http://127.0.0.1:{port}/v1", collector) for arm in ARMS}
        for child in children.values():
            assert (await asyncio.to_thread(child.stdout.readline)).strip() == "ready"  # type: ignore[union-attr]
        for trial in range(trials):
            for i in range(TASKS_PER_TRIAL):
                order = ARMS if (trial + i) % 2 == 0 else ARMS[::-1]
                for arm in order:
                    reply = await asyncio.to_thread(_ask, children[arm], "run")
                    samples[arm].append(json.loads(reply)["ms_per_step"])
        for child in children.values():
            await asyncio.to_thread(_ask, child, "stop")
            await asyncio.to_thread(child.wait, 30)
    finally:
        for child in children.values():
            if child.poll() is None:
                child.kill()
        await env.shutdown()
        engine.terminate()
        engine.wait(10)
        server.shutdown()

    traces = _Collector.counts.get("/v1/traces", [0, 0])
    metric_posts = _Collector.counts.get("/v1/metrics", [0, 0])
    assert traces[0] > 0 and metric_posts[0] > 0, f"nothing exported: {_Collector.counts}"
    off, on = samples["off"], samples["on"]
    figures = {
        "trials": trials,
        "tasks_per_arm": len(off),
        "steps_per_task": TOOL_STEPS + 1,
        "off_p50_ms_per_step": round(_pct(off, 0.5), 2),
        "off_p95_ms_per_step": round(_pct(off, 0.95), 2),
        "on_p50_ms_per_step": round(_pct(on, 0.5), 2),
        "on_p95_ms_per_step": round(_pct(on, 0.95), 2),
        "off_mean_ms_per_step": round(statistics.fmean(off), 2),
        "on_mean_ms_per_step": round(statistics.fmean(on), 2),
        "ratio_p50": round(_pct(on, 0.5) / _pct(off, 0.5), 3),
        "ratio_p95": round(_pct(on, 0.95) / _pct(off, 0.95), 3),
        "goal": "ratio_p50 <= 1.05",
        "export_env": EXPORT_ENV,
        "otlp_trace_requests": traces[0],
        "otlp_trace_bytes": traces[1],
        "otlp_metric_requests": metric_posts[0],
        "otlp_metric_bytes": metric_posts[1],
    }
    path = write_results("telemetry_overhead", figures)
    print(f"{len(off)} tasks per arm, {TOOL_STEPS + 1} steps each, arms alternated")
    print(
        f"telemetry off: p50 {figures['off_p50_ms_per_step']:7.2f} ms/step, p95 {figures['off_p95_ms_per_step']:7.2f}"
    )
    print(f"OTLP export:   p50 {figures['on_p50_ms_per_step']:7.2f} ms/step, p95 {figures['on_p95_ms_per_step']:7.2f}")
    print(f"ratio: p50 {figures['ratio_p50']:.3f}, p95 {figures['ratio_p95']:.3f}  (goal: p50 ≤ 1.05)")
    print(
        f"exported: {traces[0]} trace requests ({traces[1]} bytes), "
        f"{metric_posts[0]} metric requests ({metric_posts[1]} bytes)"
    )
    print(f"figures written to {path}")
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3, help=f"rounds of {TASKS_PER_TRIAL} tasks per arm")
    parser.add_argument("--arm", choices=ARMS, help="internal: run as one arm's worker process")
    parser.add_argument("--target", help="internal: the Temporal address")
    parser.add_argument("--engine-url", help="internal: the simulated engine")
    args = parser.parse_args()
    if args.arm:
        asyncio.run(_child(args.arm, args.target, args.engine_url))
    else:
        asyncio.run(main(args.trials))
