"""Running the llama.cpp engine: load the model, then listen (`serve`), or on a thread beside a test (`EngineThread`).

The port is bound before the model loads, so a clash fails at once, but nothing listens until the
model is loaded: a probe's connection is refused until then, as a loading vLLM refuses it, and
/v1/models answering is the readiness signal. A file that cannot be loaded ends the process
with one line saying why, which the node reads from the replica's log (its crash-loop signal).
"""

from __future__ import annotations

import time
from pathlib import Path

from orchestrator.engines.serving import AppThread, listening_socket
from orchestrator.engines.usage import UsageTally

from ..openai_face import TimingsLog
from .app import create_app
from .model import LlamaModel, ModelLoadError

LOG_PREFIX = "berth llama.cpp engine"


def serve(
    model_path: Path,
    served_name: str,
    host: str = "127.0.0.1",
    port: int = 0,
    n_ctx: int = 0,
    n_threads: int | None = None,
    usage_journal: Path | None = None,
    default_temperature: float = 1.0,
    log_level: str = "warning",
    chat_template: str | None = None,
    timings_log: Path | None = None,
) -> int:
    """Load `model_path` and serve it as `served_name` until interrupted; 1 when the model cannot load."""
    import uvicorn

    sock = listening_socket(host, port, listen=False)
    bound = sock.getsockname()[1]
    print(f"{LOG_PREFIX}: loading {model_path} on port {bound}", flush=True)
    started = time.monotonic()
    try:
        model = LlamaModel(model_path, n_ctx=n_ctx, n_threads=n_threads, chat_template=chat_template)
    except (ModelLoadError, ValueError) as exc:  # ValueError: no usable chat template
        print(f"{LOG_PREFIX}: cannot load the model: {exc}", flush=True)
        return 1
    print(
        f"{LOG_PREFIX}: {served_name} loaded in {time.monotonic() - started:.2f}s (context {model.n_ctx}, "
        f"tools {'yes' if model.template.tool_syntax else 'no: its chat template has no tool syntax'}); "
        f"http://{host}:{bound}/v1",
        flush=True,
    )
    app = create_app(
        model,
        served_name,
        UsageTally(journal=usage_journal),
        default_temperature,
        TimingsLog(timings_log) if timings_log is not None else None,
    )
    uvicorn.Server(uvicorn.Config(app, log_level=log_level, timeout_graceful_shutdown=5)).run(sockets=[sock])
    return 0


class EngineThread(AppThread):
    """The engine over a loaded model on a free loopback port in a background thread, for tests and benchmarks.

    with EngineThread(model, "smollm2-135m") as engine:
        httpx.post(f"{engine.base_url}/chat/completions", json=...)
    """

    def __init__(
        self,
        model: LlamaModel,
        served_name: str,
        host: str = "127.0.0.1",
        usage_journal: Path | None = None,
        default_temperature: float = 1.0,
    ) -> None:
        super().__init__(
            create_app(model, served_name, UsageTally(journal=usage_journal), default_temperature),
            "llama.cpp engine",
            host,
        )
        self.tally: UsageTally = self.app.state.tally
