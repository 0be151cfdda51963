"""Replicas served by llama.cpp on the CPU: `python -m orchestrator.engines.llamacpp` on the cached GGUF file.

The replica loads the weights cache's local copy (`spec.weights_path`) and nothing else: it is
never handed a hub id, so it never downloads. A path that is missing, or not a GGUF file, is
refused before anything starts; a file llama.cpp cannot load (truncated, corrupt) makes the child
print why and exit, and the node's load fails with that log line, its crash-loop signal.

llama.cpp here runs on the CPU, so `gpu_indexes` name the node's CPU device (see
`orchestrator.node.gpu_types.CPU_TYPES`) or a simulated GPU it was placed on; CUDA_VISIBLE_DEVICES
is set as for any replica and means nothing to a CPU build.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from urllib.parse import quote

from .processes import ChildProcessEngine, berth_module_env, replica_env
from .protocol import ReplicaSpec, ReplicaStartError

# engine_args a catalogue entry may set, and the server flag each becomes.
ENGINE_FLAGS = {"n_ctx": "--n-ctx", "threads": "--threads", "default_temperature": "--default-temperature"}
# engine_args the pool reads for every engine (orchestrator.pool.inventory.model_spec), not the server's.
POOL_ARGS = frozenset({"batch_tokens_per_s", "max_num_seqs"})


def gguf_file(spec: ReplicaSpec) -> Path:
    """The GGUF file the replica loads: `weights_path` itself, or the one .gguf file in that directory."""
    if not spec.weights_path:
        raise ReplicaStartError(
            f"model {spec.model!r}: a llama.cpp replica needs weights_path, the weights "
            "cache's local copy of its GGUF file (it never loads from a hub id)"
        )
    path = Path(spec.weights_path)
    if path.is_dir():
        found = sorted(path.rglob("*.gguf"))
        if len(found) != 1:
            raise ReplicaStartError(
                f"weights_path: {path} holds {len(found)} .gguf files; a llama.cpp replica "
                "needs exactly one" + (f" ({', '.join(p.name for p in found)})" if found else "")
            )
        path = found[0]
    if not path.is_file():
        raise ReplicaStartError(f"weights_path: {path} is not a file")
    with path.open("rb") as f:
        if f.read(4) != b"GGUF":
            raise ReplicaStartError(f"weights_path: {path} is not a GGUF model file")
    return path


class LlamaCppReplicaEngine(ChildProcessEngine):
    """Replicas as `python -m orchestrator.engines.llamacpp` processes, one per replica.

    Each keeps a usage journal beside its log, in the simulated engine's format, so the books
    checks that compare Berth's ledger with what the engines generated read it unchanged.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        log_dir: Path | None = None,
        python: str = sys.executable,
        threads: int | None = None,
        timings: bool = False,
    ) -> None:
        if threads is not None and threads < 1:
            raise ValueError(f"threads: must be >= 1, got {threads}")
        self.host = host
        self.log_dir = log_dir or Path(tempfile.mkdtemp(prefix="berth-replicas-"))
        self.python = python
        self.threads = threads
        self.timings = timings  # each replica also logs its requests' engine-side instants (<replica>.timings.jsonl)

    def command(self, spec: ReplicaSpec, port: int) -> list[str]:
        unknown = sorted(set(spec.engine_args) - set(ENGINE_FLAGS) - POOL_ARGS)
        if unknown:
            raise ReplicaStartError(
                f"engine_args: {', '.join(unknown)} not understood by the llama.cpp engine "
                f"(it takes {', '.join(ENGINE_FLAGS)})"
            )
        journal = self.log_dir / f"{quote(spec.replica_id, safe='')}.usage.jsonl"
        argv = [
            self.python,
            "-m",
            "orchestrator.engines.llamacpp",
            "--model-path",
            str(gguf_file(spec)),
            "--served-model-name",
            spec.model,
            "--host",
            self.host,
            "--port",
            str(port),
            "--usage-journal",
            str(journal),
        ]
        if self.timings:
            argv.extend(["--timings-log", str(journal.with_name(f"{quote(spec.replica_id, safe='')}.timings.jsonl"))])
        args = {name: value for name, value in spec.engine_args.items() if name in ENGINE_FLAGS}
        if self.threads is not None:
            args.setdefault("threads", self.threads)
        for name, value in args.items():
            argv.extend([ENGINE_FLAGS[name], str(value)])
        return argv

    def environment(self, spec: ReplicaSpec) -> dict[str, str]:
        return berth_module_env(replica_env(spec.gpu_indexes, spec.env))
