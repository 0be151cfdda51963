"""Child processes for replicas: launch in their own session, check, and stop the whole group.

Each replica runs in a new session (its own process group) because vLLM with tensor
parallelism forks one worker per GPU: stopping only the parent would leave workers holding
GPU memory. Signals therefore go to the group, and stopping waits in a thread (`Popen.wait`)
rather than sleep-polling the node agent's event loop.

Each live replica also has a pid file beside its log (pid and the process's start time, so a
reused pid is never mistaken for it): a node agent killed with SIGKILL cannot stop its
replicas, so the next agent on that machine stops what the files name before it starts any.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

from . import probe
from .protocol import ReplicaHandle, ReplicaSpec, ReplicaStartError

_ports_lock = threading.Lock()
_ports_handed_out: set[int] = set()  # picked for a replica that has not been stopped yet


def pick_free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now and that this process has not given to another live replica.

    The kernel may hand a just-closed port out again, so two replicas started back to back could
    get the same one; remembering ports until `release_port` closes that window within a node.
    """
    with _ports_lock:
        for _ in range(100):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind((host, 0))
                port = int(sock.getsockname()[1])
            if port not in _ports_handed_out:
                _ports_handed_out.add(port)
                return port
    raise ReplicaStartError(f"no free port on {host} after 100 tries")


def release_port(port: int) -> None:
    with _ports_lock:
        _ports_handed_out.discard(port)


def launch(argv: Sequence[str], env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """Start `argv` in its own session with `env`, its stdout and stderr appended to `log_path`.

    Output goes to a file, not a pipe: nobody reads a replica's pipe, and a full pipe would
    stall the engine mid-load.
    """
    executable = argv[0]
    if shutil.which(executable, path=env.get("PATH")) is None:
        raise ReplicaStartError(f"cannot start replica: executable {executable!r} not found on PATH")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        try:
            process = subprocess.Popen(
                list(argv),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            raise ReplicaStartError(f"cannot start replica: {executable!r}: {exc}") from exc
    started = _start_time(process.pid)
    if started is not None:
        pid_file(log_path).write_text(f"{process.pid} {started}\n")
    return process


def pid_file(log_path: Path) -> Path:
    return log_path.with_suffix(".pid")


def stop_orphans(log_dir: Path) -> list[int]:
    """SIGKILL the process groups of replicas an earlier node agent left running; their pids.

    Only a process whose start time matches its file is one of them: the pid may have been
    given to something else since.
    """
    stopped: list[int] = []
    for path in sorted(log_dir.glob("*.pid")):
        try:
            pid, started = (int(part) for part in path.read_text().split())
        except ValueError:
            pid, started = 0, None
        if pid > 0 and started is not None and _start_time(pid) == started:
            try:
                os.killpg(pid, signal.SIGKILL)
                stopped.append(pid)
            except (ProcessLookupError, PermissionError):
                pass
        path.unlink(missing_ok=True)
    return stopped


def _start_time(pid: int) -> int | None:
    """When the process started (clock ticks since boot, /proc/<pid>/stat field 22); None if unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": field 3 onwards
    return int(fields[19])


def running(process: subprocess.Popen[bytes]) -> bool:
    return process.poll() is None


async def terminate(process: subprocess.Popen[bytes], grace_s: float) -> int:
    """SIGTERM the process group, SIGKILL it after `grace_s`; returns the exit status."""
    _signal_group(process, signal.SIGTERM)
    try:
        code = await asyncio.to_thread(process.wait, max(grace_s, 0.0))
    except subprocess.TimeoutExpired:
        _signal_group(process, signal.SIGKILL)
        code = await asyncio.to_thread(process.wait)
    # A worker that outlived its parent (a TP rank stuck in NCCL) still holds GPU memory.
    _signal_group(process, signal.SIGKILL)
    return code


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    try:
        os.killpg(process.pid, sig)  # the child leads its own session, so its pgid is its pid
    except (ProcessLookupError, PermissionError):
        pass  # the group is already gone


def log_tail(path: Path | None, max_bytes: int = 2000) -> str:
    """The end of a replica's log, to say why it died."""
    if path is None or not path.exists():
        return ""
    with open(path, "rb") as log:
        log.seek(max(path.stat().st_size - max_bytes, 0))
        return log.read().decode(errors="replace")


def replica_env(
    gpu_indexes: Sequence[int], additions: dict[str, str], base: dict[str, str] | None = None
) -> dict[str, str]:
    """The child's environment: the node's, the spec's additions, then the GPUs placement chose.

    CUDA_VISIBLE_DEVICES comes last so no addition can move a replica onto GPUs another replica
    was given; inside the child its GPUs are then numbered 0..n-1, which is what vLLM expects.
    """
    env = dict(os.environ if base is None else base)
    env.update(additions)
    if gpu_indexes:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in gpu_indexes)
    return env


_REPO_ROOT = Path(__file__).resolve().parents[3]  # so `python -m orchestrator...` imports from any cwd


def berth_module_env(env: dict[str, str]) -> dict[str, str]:
    """A child's environment for an engine that is one of Berth's own modules: it imports this checkout."""
    return {**env, "PYTHONPATH": f"{_REPO_ROOT}:{env['PYTHONPATH']}" if env.get("PYTHONPATH") else str(_REPO_ROOT)}


class ChildProcessEngine:
    """What every engine that runs a replica as a child process does the same way: a port, a log, the
    child started with the engine's `command` and `environment`, then ready and alive probed apart.

    Readiness is the server listing the model; liveness is only the process existing, so a
    replica still loading its weights is alive and never killed for being slow.
    """

    host: str
    log_dir: Path

    def command(self, spec: ReplicaSpec, port: int) -> list[str]:
        raise NotImplementedError

    def environment(self, spec: ReplicaSpec) -> dict[str, str]:
        """The node's environment, the spec's additions, and CUDA_VISIBLE_DEVICES."""
        return replica_env(spec.gpu_indexes, spec.env)

    def load_delay_s(self, spec: ReplicaSpec) -> float:
        """How long the replica will take to load, when the engine plans it (the simulated one); 0 for real ones."""
        return 0.0

    async def start(self, spec: ReplicaSpec) -> ReplicaHandle:
        port = spec.port or pick_free_port(self.host)
        try:
            log_path = self.log_dir / f"{quote(spec.replica_id, safe='')}.log"
            process = launch(self.command(spec, port), self.environment(spec), log_path)
        except BaseException:
            release_port(port)
            raise
        return ReplicaHandle(
            spec=spec,
            base_url=f"http://{self.host}:{port}/v1",
            port=port,
            process=process,
            log_path=log_path,
            load_delay_s=self.load_delay_s(spec),
        )

    async def ready(self, handle: ReplicaHandle) -> bool:
        return await self.alive(handle) and await probe.serves_model(handle.base_url, handle.spec.model)

    async def alive(self, handle: ReplicaHandle) -> bool:
        return handle.process is not None and running(handle.process)

    async def stop(self, handle: ReplicaHandle, grace_s: float = 10.0) -> None:
        if handle.process is not None:
            await terminate(handle.process, grace_s)
        if handle.log_path is not None:
            pid_file(handle.log_path).unlink(missing_ok=True)
        release_port(handle.port)

    def base_url(self, handle: ReplicaHandle) -> str:
        return handle.base_url
