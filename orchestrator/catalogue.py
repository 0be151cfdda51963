"""The model catalogue: which models a task may name and how litellm reaches each one.

Self-hosted models are served by Berth's engines (the simulated engine by default, vLLM at
scale) and priced per token from the catalogue, since no public price map knows a private
deployment. Hosted models go to their provider through litellm with the user's key and are
priced from litellm's cost map.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from activities.ports import ModelRoute

from .config import BerthConfig


class UnknownModel(ValueError):
    """A model name the catalogue cannot serve; the message says why and what exists."""


@dataclass(frozen=True)
class CatalogueModel:
    name: str
    provider: str  # "self-hosted" (Berth's engines) or "hosted" (a provider through litellm)
    usd_per_1m_prompt: float | None
    usd_per_1m_completion: float | None
    api_key_env: str | None = None
    context_window: int = 131_072


# Self-hosted prices: an H100 at ~$2.5/h serving an 8B model at ~2,500 tokens/s of batch
# throughput costs ≈ $0.28 per 1M tokens; 1B and 70B scale with their throughput.
SEED_MODELS: tuple[CatalogueModel, ...] = (
    CatalogueModel("llama-3.2-1b", "self-hosted", 0.05, 0.10),
    CatalogueModel("llama-3.1-8b", "self-hosted", 0.20, 0.30),
    CatalogueModel("qwen2.5-7b", "self-hosted", 0.20, 0.30),
    CatalogueModel("llama-3.1-70b", "self-hosted", 0.90, 1.20),
    CatalogueModel("openai/gpt-4o-mini", "hosted", None, None, api_key_env="OPENAI_API_KEY"),
    CatalogueModel("openai/gpt-4o", "hosted", None, None, api_key_env="OPENAI_API_KEY"),
    CatalogueModel("anthropic/claude-3-5-haiku-latest", "hosted", None, None, api_key_env="ANTHROPIC_API_KEY"),
)


class ModelCatalogue:
    """Resolves model names to litellm routes; implements activities.ports.ModelRouter."""

    def __init__(self, config: BerthConfig, models: tuple[CatalogueModel, ...] = SEED_MODELS) -> None:
        self._config = config
        self._models = {m.name: m for m in models}

    def names(self) -> list[str]:
        return list(self._models)

    def get(self, name: str) -> CatalogueModel | None:
        return self._models.get(name)

    def check(self, name: str) -> None:
        """Raise UnknownModel when `name` cannot be served right now (unknown, or its key is unset)."""
        self.route(name)

    def route(self, model: str) -> ModelRoute:
        entry = self._models.get(model)
        if entry is None:
            known = ", ".join(sorted(self._models))
            raise UnknownModel(f"unknown model {model!r}; the catalogue has: {known}")
        if entry.provider == "hosted":
            key = os.environ.get(entry.api_key_env or "")
            if not key:
                raise UnknownModel(f"model {model!r} is hosted and needs {entry.api_key_env} to be set")
            return ModelRoute(
                name=model,
                litellm_model=model,
                api_base=None,
                api_key=key,
                usd_per_1m_prompt=None,
                usd_per_1m_completion=None,
                served_by=model.split("/", 1)[0],
            )
        return ModelRoute(
            name=model,
            litellm_model=f"hosted_vllm/{model}",
            api_base=self._config.resolved_engine_url,
            api_key="berth-simulated",
            usd_per_1m_prompt=entry.usd_per_1m_prompt,
            usd_per_1m_completion=entry.usd_per_1m_completion,
            served_by=f"engine@{self._config.resolved_engine_url}",
        )
