"""Berth's built-in inference engine: an OpenAI-compatible server that behaves like vLLM, without a GPU.

It is how Berth runs whole on a laptop or in CI: agents reach it through litellm's
`hosted_vllm/` route, it streams at a real model's pace, reports exact usage and answers
with deterministic replies that make agents call tools, spawn sub-agents and finish.

    python -m orchestrator.engines.simulated --port 8090 --latency-scale 1.0
"""

from .app import create_app
from .models import DEFAULT_MODELS, SimulatedModel
from .policy import PlannedCall, Reply, reply
from .server import EngineThread, serve
from .usage import UsageCounts, UsageTally

__all__ = [
    "DEFAULT_MODELS",
    "EngineThread",
    "PlannedCall",
    "Reply",
    "SimulatedModel",
    "UsageCounts",
    "UsageTally",
    "create_app",
    "reply",
    "serve",
]
