"""Replicas served by SGLang (`python -m sglang.launch_server`), beside vLLM on real GPU nodes.

As with vLLM, Berth builds the command line and the environment: SGLang loads the node's cached copy
(`--model-path <weights_path>`, never a hub id, hubs offline), shards it over the GPUs placement chose
(`--tp`, CUDA_VISIBLE_DEVICES) and lists the catalogue name (`--served-model-name`) on /v1/models once
it serves, which is the readiness signal. Nothing here runs in CI (SGLang needs a GPU); the command it
builds is tested instead.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from .processes import ChildProcessEngine, replica_env
from .protocol import EngineArg, ReplicaSpec, ReplicaStartError
from .vllm import OFFLINE_ENV, engine_flags, local_weights

# SGLang's static share of each GPU for weights and KV cache; it picks one by GPU size when none is given
# (0.8-0.9). Berth leaves it to SGLang unless a catalogue entry sets mem_fraction_static.
_RESERVED_FLAGS = frozenset({"host", "port", "served-model-name", "tp", "tp-size", "model-path"})


class SglangReplicaEngine(ChildProcessEngine):
    """Replicas as `python -m sglang.launch_server` processes, one per replica.

    engine_args become flags (`context_length=8192` → `--context-length 8192`; True → `--flag`). SGLang's
    switches have no `--no-` form, so False is refused: name the switch that turns a default off
    (`disable_radix_cache: true`).
    """

    def __init__(self, python: str = "python3", host: str = "127.0.0.1", log_dir: Path | None = None) -> None:
        self.python = python
        self.host = host
        self.log_dir = log_dir or Path(tempfile.mkdtemp(prefix="berth-replicas-"))

    def command(self, spec: ReplicaSpec, port: int) -> list[str]:
        """The `python -m sglang.launch_server` argv for `spec` listening on `port`."""
        args = engine_flags(spec, _RESERVED_FLAGS)
        source = local_weights(spec, args.pop("model", None), "SGLang")
        argv = [
            self.python,
            "-m",
            "sglang.launch_server",
            "--model-path",
            source,
            "--served-model-name",
            spec.model,
            "--tp",
            str(spec.tensor_parallel),
            "--host",
            self.host,
            "--port",
            str(port),
        ]
        for flag, value in args.items():
            argv.extend(_flag(flag, value))
        return argv

    def environment(self, spec: ReplicaSpec) -> dict[str, str]:
        return replica_env(spec.gpu_indexes, {**OFFLINE_ENV, **spec.env})


def _flag(name: str, value: EngineArg) -> list[str]:
    if value is True:
        return [f"--{name}"]
    if value is False:
        raise ReplicaStartError(
            f"engine_args: {name} is false, but SGLang's switches have no --no- form; "
            f"leave it out, or name the switch that turns the default off"
        )
    return [f"--{name}", str(value)]
