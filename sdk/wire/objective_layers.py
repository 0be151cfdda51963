"""Latency objectives as people set them: a tenant's, an agent's and a task's layers, merged into a task's own.

`resolve` (objectives.py) lets every field a layer has *set* win over the layers under it, a null included. A layer
read back from JSON marks every field the JSON carries as set, and a stored spec carries them all (`"tpot_s": null`
for one never given), so an agent that set only `ttft_s` would clear its tenant's `tpot_s` once stored and read
again. Here a null inherits, as an absent field does: `layer` keeps the fields with a value, and `effective` merges
layers read that way, so a layer means the same whether it came from a client, a form, the store or a fork.
"""

from __future__ import annotations

from .lease import ServiceClass
from .objectives import LatencyObjectives, resolve


def layer(objectives: LatencyObjectives | None) -> LatencyObjectives | None:
    """The fields `objectives` gives a value, as a layer for `resolve`; None when it gives none."""
    if objectives is None:
        return None
    values = objectives.model_dump(exclude_none=True)
    return LatencyObjectives(**values) if values else None


def effective(
    service_class: ServiceClass,
    tenant: LatencyObjectives | None,
    agent: LatencyObjectives | None,
    task: LatencyObjectives | None,
) -> LatencyObjectives:
    """A task's objectives: its class's defaults, then its tenant's, its agent's and its own settings, field by
    field, the most specific winning."""
    return resolve(service_class, layer(tenant), layer(agent), layer(task))


def patched(current: LatencyObjectives | None, change: LatencyObjectives | None) -> LatencyObjectives | None:
    """`current` changed as a JSON merge patch: each field `change` sends is set, one it sends as null is removed,
    the others stay; a `change` of None removes them all. None when nothing is left."""
    if change is None:
        return None
    values = current.model_dump(exclude_none=True) if current is not None else {}
    for name in change.model_fields_set:
        value = getattr(change, name)
        if value is None:
            values.pop(name, None)
        else:
            values[name] = value
    return LatencyObjectives(**values) if values else None


def describe(objectives: LatencyObjectives | None) -> str:
    """One line for people (CLI, UI): "first token ≤ 1 s, ≤ 50 ms a token after it, for 99% of calls"."""
    o = layer(objectives)
    if o is None:
        return "none"
    parts = []
    if o.ttft_s is not None:
        parts.append(f"first token ≤ {_duration(o.ttft_s)}")
    if o.tpot_s is not None:
        parts.append(f"≤ {_duration(o.tpot_s)} a token after it")
    if o.deadline_s is not None:
        parts.append(f"answer within {_duration(o.deadline_s)}")
    if o.attainment is not None:
        share = f"{round(o.attainment * 100, 2):g}%"
        parts.append(f"for {share} of calls" if o.per_call else f"attainment {share}")
    return ", ".join(parts)


def _duration(seconds: float) -> str:
    if seconds < 1:
        return f"{round(seconds * 1000, 3):g} ms"
    if seconds < 120:
        return f"{round(seconds, 3):g} s"
    if seconds < 3600:
        return f"{round(seconds / 60, 2):g} min"
    return f"{round(seconds / 3600, 2):g} h"
