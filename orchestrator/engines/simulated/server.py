"""Running the engine: as its own process (`serve`) or on a thread beside a test (`EngineThread`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

from ..serving import AppThread, listening_socket
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


class EngineThread(AppThread):
    """The engine on a free loopback port in a background thread, for tests and benchmarks in one process.

    with EngineThread(latency_scale=0) as engine:
        litellm.completion(model="hosted_vllm/llama-3.1-8b", api_base=engine.base_url, ...)
    """

    def __init__(
        self, latency_scale: float = 1.0, models: Sequence[SimulatedModel] = DEFAULT_MODELS, host: str = "127.0.0.1"
    ) -> None:
        super().__init__(create_app(models, latency_scale), "simulated engine", host)
        self.tally: UsageTally = self.app.state.tally
