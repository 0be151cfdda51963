"""Running the engine: as its own process (`serve`) or on a thread beside a test (`EngineThread`)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from .app import create_app, warm_up_tokenizer
from .models import DEFAULT_MODELS, SimulatedModel
from .usage import UsageTally


def serve(
    host: str = "127.0.0.1",
    port: int = 8090,
    latency_scale: float = 1.0,
    models: Sequence[SimulatedModel] = DEFAULT_MODELS,
    log_level: str = "warning",
    usage_journal: Path | None = None,
    load_delay_s: float = 0.0,
) -> None:
    """Run the engine until interrupted. Port 0 picks a free port; the line printed first names it.

    `load_delay_s` plays a replica loading its weights: the port is bound at once (a clash fails
    now, not after the wait) but nothing listens until the delay has passed and the app has
    started, so a connection is refused and readiness probes are honest, as with a loading vLLM.
    """
    import uvicorn

    sock = listening_socket(host, port, listen=load_delay_s <= 0)
    bound = sock.getsockname()[1]
    if load_delay_s > 0:
        print(f"berth simulated engine: loading weights for {load_delay_s:.1f}s on port {bound}", flush=True)
        # The engine's own start-up (its tokenizer) runs while the weights "load", as a real
        # engine initialises CUDA while it reads weights; the app's start then finds it done.
        threading.Thread(target=warm_up_tokenizer, daemon=True).start()
        time.sleep(load_delay_s)  # uvicorn calls listen() on the socket once the app has started
    print(f"berth simulated engine: http://{host}:{bound}/v1 (latency x{latency_scale})", flush=True)
    app = create_app(models, latency_scale, tally=UsageTally(journal=usage_journal))
    config = uvicorn.Config(app, log_level=log_level, timeout_graceful_shutdown=5)
    uvicorn.Server(config).run(sockets=[sock])


def listening_socket(host: str, port: int, listen: bool = True) -> socket.socket:
    """A bound listener whose accepted connections have Nagle's algorithm off (`listen=False`: bound only).

    uvicorn does not set TCP_NODELAY on connections from a socket it is handed; without it a
    kept-alive client waits out a 40 ms delayed ACK on every response. Linux copies the
    option from the listener to each accepted socket.
    """
    if listen:
        sock = socket.create_server((host, port))
    else:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as create_server does on POSIX
        sock.bind((host, port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class EngineThread:
    """The engine on a free loopback port in a background thread, for tests and benchmarks in one process.

        with EngineThread(latency_scale=0) as engine:
            litellm.completion(model="hosted_vllm/llama-3.1-8b", api_base=engine.base_url, ...)
    """

    def __init__(self, latency_scale: float = 1.0, models: Sequence[SimulatedModel] = DEFAULT_MODELS,
                 host: str = "127.0.0.1") -> None:
        import uvicorn

        self.app = create_app(models, latency_scale)
        self.tally: UsageTally = self.app.state.tally
        self._sock = listening_socket(host, 0)
        self.port: int = self._sock.getsockname()[1]
        self.base_url = f"http://{host}:{self.port}/v1"
        self._server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", timeout_graceful_shutdown=1))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    def start(self, timeout_s: float = 60.0) -> "EngineThread":
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the simulated engine did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()

    def __enter__(self) -> "EngineThread":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
