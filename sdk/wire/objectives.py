"""Latency objectives: what a task's model calls promise the person (or agent) waiting on them.

A task's service class carries objectives, as DistServe judges serving by goodput (calls within their time to
first token and time per output token) and Dynamo's planner and llm-d's scheduler size and route by them:
interactive work has a time to first token and a time per output token that a share of its calls (`attainment`,
the percentile) must meet; batch work has a completion deadline for the whole task; low_priority work promises
nothing. The pool places a call on a candidate predicted to meet them whenever one exists, and its scaler adds
capacity when the predicted attainment falls below the target and removes it only while the target holds.

Each class has defaults (`DEFAULT_OBJECTIVES`); a tenant, an agent and a task may each set any field, and the
most specific setting of each field wins (`resolve`).
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from .lease import ServiceClass
from .limits import numbers_not_booleans

MAX_OBJECTIVE_TTFT_S = 600.0  # ten minutes to a first token is no interactive promise: a typo
MAX_OBJECTIVE_TPOT_S = 10.0
MAX_DEADLINE_S = 30 * 24 * 3600.0


class LatencyObjectives(BaseModel):
    """Objectives for one call (`ttft_s`, `tpot_s`) or one task (`deadline_s`); unset fields inherit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttft_s: float | None = Field(
        default=None, gt=0, le=MAX_OBJECTIVE_TTFT_S, description="seconds from asking to the first token"
    )
    tpot_s: float | None = Field(
        default=None, gt=0, le=MAX_OBJECTIVE_TPOT_S, description="seconds per output token after the first"
    )
    deadline_s: float | None = Field(
        default=None, gt=0, le=MAX_DEADLINE_S, description="seconds from submission to the task's answer (batch)"
    )
    attainment: float | None = Field(
        default=None,
        ge=0.5,
        le=0.9999,
        description="share of calls that must meet both call objectives (0.99: the p99 is within them)",
    )

    _numbers = numbers_not_booleans("ttft_s", "tpot_s", "deadline_s", "attainment")

    def merged(self, override: LatencyObjectives | None) -> LatencyObjectives:
        """These objectives with every field `override` sets replacing this one's."""
        if override is None:
            return self
        return self.model_copy(update={k: getattr(override, k) for k in override.model_fields_set})

    @property
    def target(self) -> float:
        return self.attainment if self.attainment is not None else DEFAULT_ATTAINMENT

    def met(self, ttft_s: float, tpot_s: float) -> bool:
        """Whether a call that took `ttft_s` to its first token and `tpot_s` per token after met both."""
        return (self.ttft_s is None or ttft_s <= self.ttft_s) and (self.tpot_s is None or tpot_s <= self.tpot_s)

    @property
    def per_call(self) -> bool:
        """Whether it sets anything a single call can meet or miss (batch and low_priority set none)."""
        return self.ttft_s is not None or self.tpot_s is not None


DEFAULT_ATTAINMENT = 0.99
# Interactive: a first token within a second (a person notices longer; code assistants promise less) and 20
# tokens/s after it (faster than anyone reads, and than an agent's tool parser needs), at p99. Batch: the task's
# answer within an hour. low_priority: nothing.
DEFAULT_OBJECTIVES: Mapping[ServiceClass, LatencyObjectives] = {
    "interactive": LatencyObjectives(ttft_s=1.0, tpot_s=0.05, attainment=DEFAULT_ATTAINMENT),
    "batch": LatencyObjectives(deadline_s=3600.0, attainment=0.95),
    "low_priority": LatencyObjectives(),
}


def resolve(service_class: ServiceClass, *layers: LatencyObjectives | None) -> LatencyObjectives:
    """The class's defaults with each layer's settings over them, least specific first (tenant, agent, task)."""
    objectives = DEFAULT_OBJECTIVES[service_class]
    for layer in layers:
        objectives = objectives.merged(layer)
    return objectives
