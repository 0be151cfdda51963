"""How a model samples: the settings an agent (or one task of it) asks its model calls to use.

Only what is set is sent, so an unset field leaves the engine's or provider's own default. A task's
settings override its agent's field by field. Whether a route honours a setting is checked when a
task is submitted (the catalogue knows each engine and litellm each provider): a setting the model
cannot apply is refused there, naming it, rather than silently dropped on every call.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .wire.limits import numbers_not_booleans

MAX_STOP_STRINGS = 4  # OpenAI's limit, which the engines keep too
MAX_STOP_CHARS = 64
MAX_SEED = 2**32 - 1  # what llama.cpp and vLLM take


class ModelSettings(BaseModel):
    """Sampling settings for an agent's model calls; `None` leaves the engine's default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float | None = Field(
        default=None, ge=0, le=2, allow_inf_nan=False, description="0 is greedy; higher samples more widely"
    )
    top_p: float | None = Field(
        default=None,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description="sample only from the most likely tokens covering this share",
    )
    stop: list[str] | None = Field(
        default=None,
        max_length=MAX_STOP_STRINGS,
        description=f"up to {MAX_STOP_STRINGS} strings that end the answer (not included)",
    )
    seed: int | None = Field(
        default=None, ge=0, le=MAX_SEED, description="the same request with the same seed samples the same answer"
    )

    _numbers = numbers_not_booleans("temperature", "top_p", "seed")

    @field_validator("stop", mode="before")
    @classmethod
    def _one_stop_is_a_list(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @field_validator("stop")
    @classmethod
    def _stops_are_short_and_not_empty(cls, stops: list[str] | None) -> list[str] | None:
        for stop in stops or ():
            if not 1 <= len(stop) <= MAX_STOP_CHARS:
                raise ValueError(f"each stop string has 1 to {MAX_STOP_CHARS} characters, got {len(stop)}")
        return stops

    def chosen(self) -> dict[str, Any]:
        """The settings that are set, as the OpenAI chat API names them: what a call sends."""
        return self.model_dump(exclude_none=True)

    def over(self, base: ModelSettings | None) -> ModelSettings:
        """These settings, with `base`'s wherever these leave a field unset (a task's over its agent's)."""
        return ModelSettings(**{**(base.chosen() if base else {}), **self.chosen()})
