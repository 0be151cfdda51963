"""A real inference engine that runs anywhere: one GGUF model served by llama.cpp on the CPU.

Berth's own OpenAI-compatible server over `llama_cpp.Llama` (llama-cpp-python), speaking the same
slice of the API as the simulated engine and vLLM, so a node reaches it through litellm's
`hosted_vllm/` route like any replica:

    python -m orchestrator.engines.llamacpp --model-path model.gguf --served-model-name smollm2-135m --port 8091

Nothing here imports llama_cpp at module level: a node without llama-cpp-python imports this
package and refuses llama.cpp models by name (`available()` says why).
"""

from __future__ import annotations

from .chat import ChatTemplate, ChatTemplateError, ParsedCall, ToolCallStream
from .model import GGUF_MAGIC, LlamaModel, ModelLoadError, check_gguf, packaged_file

MISSING = "llama-cpp-python is not installed (make installs it)"


def available() -> str | None:
    """None when llama-cpp-python imports here (its shared library loads), else why not."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return MISSING
    except OSError as exc:  # installed, but its compiled library does not load on this machine (glibc, CPU)
        return f"llama-cpp-python is installed but does not load: {exc}"
    return None


__all__ = [
    "GGUF_MAGIC",
    "MISSING",
    "ChatTemplate",
    "ChatTemplateError",
    "LlamaModel",
    "ModelLoadError",
    "ParsedCall",
    "ToolCallStream",
    "available",
    "check_gguf",
    "packaged_file",
]
