"""Replicas of the built-in simulated engine: real child processes that load as slowly as real ones.

The load wait runs inside the child (`--load-delay`): the node agent's loop is never blocked,
and the child neither listens nor answers /health or /v1/models until the wait is over, so the
agent's readiness probe sees what it would see with vLLM. The wait is derived from the
weights' size and the tier they load from, then scaled by `load_time_scale` so demos and tests
stay short while keeping the tiers' proportions.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from urllib.parse import quote

from orchestrator.engines.simulated.models import DEFAULT_MODELS
from orchestrator.weights_transfer import (
    DATACENTER_BYTES_PER_S,
    DISK_BYTES_PER_S,
    ENGINE_START_S,
    ORIGIN_BYTES_PER_S,
)

from .processes import ChildProcessEngine, berth_module_env, replica_env
from .protocol import ReplicaSpec, ReplicaStartError

_FETCH_BYTES_PER_S = {"datacenter": DATACENTER_BYTES_PER_S, "origin": ORIGIN_BYTES_PER_S}

# For a model the simulator has no defaults for, timings follow its size. Decode is memory-bound:
# each token reads every weight once, and H100 HBM3 (3.35 TB/s) achieves ~57% of that in vLLM,
# 1.9e12 B/s: 16 GB of 8B bf16 weights → ~120 tokens/s, the default llama-3.1-8b's figure.
DECODE_BYTES_PER_S = 1.9e12
# A short prompt's TTFT grows with size (prefill computes over every weight): the default 8B's
# 0.15 s for 16 GB, i.e. 0.15 / 16e9 s per byte, and never under 0.05 s of scheduling.
TTFT_S_PER_WEIGHT_BYTE = 0.15 / 16e9
MIN_TTFT_S = 0.05


def planned_load_delay_s(spec: ReplicaSpec, load_time_scale: float = 1.0) -> float:
    """Seconds a replica of `spec` takes to become ready, before scaling: fetch + disk read + engine start.

    "warm" weights are already in host memory, so only the engine starts. Fetched bytes are
    written to the disk cache as they arrive and stay in the page cache, so only the bytes not
    fetched are read from disk.
    """
    if load_time_scale < 0:
        raise ValueError(f"load_time_scale: must be >= 0, got {load_time_scale}")
    if spec.load_tier == "warm":
        seconds = ENGINE_START_S
    else:
        fetch_s = spec.bytes_to_fetch / _FETCH_BYTES_PER_S[spec.load_tier] if spec.bytes_to_fetch else 0.0
        read_s = (spec.weights_bytes - spec.bytes_to_fetch) / DISK_BYTES_PER_S
        seconds = fetch_s + read_s + ENGINE_START_S
    return seconds * load_time_scale


def simulated_model_arg(spec: ReplicaSpec) -> str:
    """The engine's `--model` value: the spec's timings, a default's name, or timings from the weights' size.

    engine_args `ttft_s`, `tokens_per_s` (and optionally `context_window`) set the timings
    outright; otherwise a default model keeps its own; otherwise they follow the weights' size.
    """
    if ":" in spec.model:
        raise ReplicaStartError(f"model {spec.model!r}: the simulated engine's --model cannot carry a ':' in a name")
    args = spec.engine_args
    defaults = {m.name: m for m in DEFAULT_MODELS}
    if "ttft_s" in args or "tokens_per_s" in args:
        base = defaults.get(spec.model)
        ttft = float(args.get("ttft_s", base.ttft_s if base else _ttft_for(spec)))
        tps = float(args.get("tokens_per_s", base.tokens_per_s if base else _tokens_per_s_for(spec)))
        context = args.get("context_window", base.context_window if base else None)
        return f"{spec.model}:{ttft}:{tps}" + (f":{int(context)}" if context is not None else "")
    if spec.model in defaults:
        return spec.model
    return f"{spec.model}:{_ttft_for(spec)}:{_tokens_per_s_for(spec)}"


def _ttft_for(spec: ReplicaSpec) -> float:
    _need_weights(spec)
    return max(MIN_TTFT_S, spec.weights_bytes * TTFT_S_PER_WEIGHT_BYTE)


def _tokens_per_s_for(spec: ReplicaSpec) -> float:
    _need_weights(spec)
    return DECODE_BYTES_PER_S / spec.weights_bytes


def _need_weights(spec: ReplicaSpec) -> None:
    if spec.weights_bytes <= 0:
        raise ReplicaStartError(
            f"model {spec.model!r}: not a default simulated model; give its weights_bytes "
            "or engine_args ttft_s and tokens_per_s"
        )


class SimulatedReplicaEngine(ChildProcessEngine):
    """Replicas as `python -m orchestrator.engines.simulated` processes, one per replica.

    `load_time_scale` multiplies the planned load wait (0.01 turns a 40 s disk load into 0.4 s);
    `latency_scale` is the engine's own (TTFT and per-token time) and 0 answers at once.
    """

    def __init__(
        self,
        load_time_scale: float = 1.0,
        latency_scale: float = 1.0,
        host: str = "127.0.0.1",
        log_dir: Path | None = None,
        python: str = sys.executable,
    ) -> None:
        if load_time_scale < 0:
            raise ValueError(f"load_time_scale: must be >= 0, got {load_time_scale}")
        if latency_scale < 0:
            raise ValueError(f"latency_scale: must be >= 0, got {latency_scale}")
        self.load_time_scale = load_time_scale
        self.latency_scale = latency_scale
        self.host = host
        self.log_dir = log_dir or Path(tempfile.mkdtemp(prefix="berth-replicas-"))
        self.python = python

    def command(self, spec: ReplicaSpec, port: int) -> list[str]:
        # Each replica keeps a usage journal beside its log: the engine's own account of what it
        # generated, which tests compare with Berth's ledger across replicas and restarts.
        journal = self.log_dir / f"{quote(spec.replica_id, safe='')}.usage.jsonl"
        return [
            self.python,
            "-m",
            "orchestrator.engines.simulated",
            "--host",
            self.host,
            "--port",
            str(port),
            "--latency-scale",
            repr(self.latency_scale),
            "--model",
            simulated_model_arg(spec),
            "--load-delay",
            repr(planned_load_delay_s(spec, self.load_time_scale)),
            "--usage-journal",
            str(journal),
        ]

    def environment(self, spec: ReplicaSpec) -> dict[str, str]:
        return berth_module_env(replica_env(spec.gpu_indexes, spec.env))

    def load_delay_s(self, spec: ReplicaSpec) -> float:
        return planned_load_delay_s(spec, self.load_time_scale)
