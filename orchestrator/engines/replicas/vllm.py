"""Replicas served by vLLM (`vllm serve`), the engine Berth runs on real GPU nodes.

Only the command line and environment are Berth's concern: vLLM reads the weights from the
node's cache (`spec.weights_path`, the revision's directory: never a hub id, and with the hubs
switched offline, so no replica downloads on its own), shards them over the GPUs named in
CUDA_VISIBLE_DEVICES, captures CUDA graphs, and then lists the model on /v1/models, which is the
readiness signal. Nothing here runs in CI (vLLM needs a GPU);
the command it builds is tested instead.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from .processes import ChildProcessEngine, replica_env
from .protocol import EngineArg, ReplicaSpec, ReplicaStartError

# vLLM's own default: 90% of each GPU for weights, activations and KV cache, the rest for the
# CUDA context and NCCL buffers. Placement already refused GPUs too small for weights + KV headroom.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.90
# Flags that come from the spec or the node, not from a catalogue entry's engine_args: letting
# engine_args set them would serve the replica where the node does not look for it.
_RESERVED_FLAGS = frozenset({"host", "port", "served-model-name", "tensor-parallel-size"})
# Set in every engine child: the weights are the node's cached copy, so reaching for a hub is a bug that
# should fail at once instead of downloading tens of GB behind the cache's back.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def local_weights(spec: ReplicaSpec, override: object | None, engine: str) -> str:
    """The path an engine loads: the cache's copy, or an operator's absolute path in engine_args `model`;
    a hub id is refused, since the engine would download it itself, past the cache."""
    if override is not None:
        if spec.weights_path:
            raise ReplicaStartError("engine_args: model comes from the node's weights cache for a model with weights")
        if not str(override).startswith("/"):
            raise ReplicaStartError(
                f"engine_args: model {override!r} is not a local path; {engine} starts on the "
                f"node's cached copy: give the catalogue entry its weights (origin and files)"
            )
        return str(override)
    if not spec.weights_path:
        raise ReplicaStartError(
            f"weights_path: {engine} starts on the node's cached copy of {spec.model}'s weights;"
            f" give the catalogue entry its weights (origin and files)"
        )
    return spec.weights_path


class VllmReplicaEngine(ChildProcessEngine):
    """Replicas as `vllm serve` processes, one per replica, on the GPUs placement chose.

    engine_args become flags (`max_model_len=8192` → `--max-model-len 8192`; True → `--flag`,
    False → `--no-flag`). The replica serves under the catalogue name and loads `spec.weights_path`
    (or, for weights an operator keeps outside the cache, an absolute path in engine_args `model`).
    """

    def __init__(
        self,
        executable: str = "vllm",
        host: str = "127.0.0.1",
        log_dir: Path | None = None,
        gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    ) -> None:
        if not 0 < gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization: must be within (0, 1], got {gpu_memory_utilization}")
        self.executable = executable
        self.host = host
        self.log_dir = log_dir or Path(tempfile.mkdtemp(prefix="berth-replicas-"))
        self.gpu_memory_utilization = gpu_memory_utilization

    def command(self, spec: ReplicaSpec, port: int) -> list[str]:
        """The `vllm serve` argv for `spec` listening on `port`."""
        args = engine_flags(spec, _RESERVED_FLAGS)
        source = local_weights(spec, args.pop("model", None), "vLLM")
        utilization = args.pop("gpu-memory-utilization", self.gpu_memory_utilization)
        argv = [
            self.executable,
            "serve",
            source,
            "--host",
            self.host,
            "--port",
            str(port),
            "--served-model-name",
            spec.model,
            "--tensor-parallel-size",
            str(spec.tensor_parallel),
            "--gpu-memory-utilization",
            str(utilization),
        ]
        for flag, value in args.items():
            argv.extend(_flag(flag, value))
        return argv

    def environment(self, spec: ReplicaSpec) -> dict[str, str]:
        """The child's environment: the node's, the spec's additions, and CUDA_VISIBLE_DEVICES."""
        return replica_env(spec.gpu_indexes, {**OFFLINE_ENV, **spec.env})


def engine_flags(spec: ReplicaSpec, reserved: frozenset[str]) -> dict[str, EngineArg]:
    """A catalogue entry's engine_args as command-line flag names (`max_model_len` → `max-model-len`); refused
    when one names a flag the replica spec or the node sets (the replica would serve where nobody looks)."""
    args = {key.replace("_", "-"): value for key, value in spec.engine_args.items()}
    taken = sorted(reserved & args.keys())
    if taken:
        raise ReplicaStartError(f"engine_args: {', '.join(taken)} come from the replica spec, not engine_args")
    return args


def _flag(name: str, value: EngineArg) -> list[str]:
    # vLLM's boolean options are argparse BooleanOptionalAction: --x turns on, --no-x turns off
    # (needed for options on by default, such as prefix caching).
    if value is True:
        return [f"--{name}"]
    if value is False:
        return [f"--no-{name}"]
    return [f"--{name}", str(value)]
