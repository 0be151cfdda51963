"""Timing and context settings of the models the simulated engine serves.

The numbers are what a single replica of each model does on one modern data-centre GPU
(H100-class, bf16, vLLM, light load), so that step durations, TTFT and tokens/s that Berth
records on a laptop look like the ones it records on a real fleet.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SimulatedModel:
    """One served model: how long until its first token, how fast it then generates, how much it reads."""

    name: str
    ttft_s: float
    tokens_per_s: float
    context_window: int = 131_072

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("name: a simulated model needs a name")
        if self.ttft_s < 0:
            raise ValueError(f"ttft_s: must be >= 0, got {self.ttft_s}")
        if self.tokens_per_s <= 0:
            raise ValueError(f"tokens_per_s: must be > 0, got {self.tokens_per_s}")
        if self.context_window <= 0:
            raise ValueError(f"context_window: must be > 0, got {self.context_window}")


# Llama 3.x models have a 128 k (131,072) context; Qwen2.5-7B-Instruct ships a 32 k window
# (128 k only with YaRN enabled, which vLLM leaves off by default).
DEFAULT_MODELS: tuple[SimulatedModel, ...] = (
    SimulatedModel("llama-3.2-1b", ttft_s=0.05, tokens_per_s=400.0, context_window=131_072),
    SimulatedModel("llama-3.1-8b", ttft_s=0.15, tokens_per_s=120.0, context_window=131_072),
    SimulatedModel("llama-3.1-70b", ttft_s=0.6, tokens_per_s=35.0, context_window=131_072),
    SimulatedModel("qwen2.5-7b", ttft_s=0.15, tokens_per_s=130.0, context_window=32_768),
)


def parse_model(spec: str) -> SimulatedModel:
    """A model from the command line: a default's name, or `name:ttft_s:tokens_per_s[:context_window]`.

    The long form lets a node agent serve a catalogue model the defaults do not know.
    """
    defaults = {m.name: m for m in DEFAULT_MODELS}
    if ":" not in spec:
        if spec not in defaults:
            raise ValueError(
                f"model {spec!r}: not a default ({', '.join(defaults)}); use name:ttft_s:tokens_per_s[:context]"
            )
        return defaults[spec]
    parts = spec.split(":")
    if len(parts) not in (3, 4):
        raise ValueError(f"model {spec!r}: expected name:ttft_s:tokens_per_s[:context_window]")
    try:
        numbers = [float(parts[1]), float(parts[2])] + ([int(parts[3])] if len(parts) == 4 else [])
    except ValueError as exc:
        raise ValueError(f"model {spec!r}: {exc}") from exc
    if len(numbers) == 3:
        return SimulatedModel(parts[0], numbers[0], numbers[1], int(numbers[2]))
    return SimulatedModel(parts[0], numbers[0], numbers[1])
