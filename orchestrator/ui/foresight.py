"""What the scaler learned of each model, in the words the admin UI shows: the keep-alive per replica level,
where each window came from, and the replicas it pre-warmed and whether a step used them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from sdk import CatalogueModel
from sdk.wire.catalogue import KeepAliveSource, KeepAliveView, ModelForesight, PrewarmView

WINDOW_WORDS: dict[KeepAliveSource, str] = {
    "learned": "learned from its idle gaps",
    "break-even": "kept until holding it has cost one cold start",
    "operator": "the policy's idle timeout",
}


def duration(seconds: float) -> str:
    """ "40 s", "12 min", "1.5 h": how the pages say a span of time."""
    return (
        f"{seconds:.0f} s"
        if seconds < 90
        else f"{seconds / 60:.0f} min"
        if seconds < 5400
        else f"{seconds / 3600:.1f} h"
    )


def unload_window(model: CatalogueModel | None) -> tuple[float, KeepAliveSource] | None:
    """(seconds an idle replica is kept, where that came from): the operator's fixed idle timeout, else the
    scaler's window for the model's first replica (learned, or its break-even); None when neither is known yet."""
    if model is None:
        return None
    if model.policy.idle_timeout_s is not None:
        return model.policy.idle_timeout_s, "operator"
    first = model.foresight.level(1) if model.foresight else None
    return (first.window_s, first.source) if first is not None else None


@dataclass(frozen=True)
class KeepAliveRow:
    """One replica level's keep-alive, in the words the Models page shows."""

    level: int
    kept: str  # "12 min idle", or "unloaded at once, then kept until 40 min idle"
    prewarm: str  # "at 15 min idle", or "–"
    source: KeepAliveSource
    why: str  # "learned from 254 idle gaps", …


PrewarmUsed = Literal["yes", "no", "not-yet"]


@dataclass(frozen=True)
class PrewarmRow:
    """A replica the scaler started ahead of demand: `used` is yes, no (ended unused) or not-yet (still up)."""

    replica_id: str
    started_at: datetime
    reason: str
    used: PrewarmUsed
    used_text: str
    ended_at: datetime | None


@dataclass(frozen=True)
class ForesightView:
    """What the scaler learned of a model and did ahead of its demand, for the Models page."""

    updated_at: datetime
    levels: list[KeepAliveRow]
    prewarms: list[PrewarmRow]
    announced: int
    intent_used: str  # GPU-hours in the last hour, "0.42"
    intent_allowed: str  # the policy's GPU-hours per hour, "2"
    slo: str | None  # "97.5% of recent grants within objectives (target 99%)"; None without judged grants
    slo_below_target: bool


def foresight_view(model: CatalogueModel) -> ForesightView | None:
    """The model's foresight as the page shows it; None until the scaler has planned for the model."""
    f = model.foresight
    if f is None:
        return None
    return ForesightView(
        updated_at=f.updated_at,
        levels=[_keep_alive_row(k) for k in sorted(f.keep_alive, key=lambda k: k.level)],
        prewarms=[_prewarm_row(p) for p in f.prewarms],
        announced=f.announced,
        intent_used=f"{f.intent_gpu_hours_last_hour:.2f}",
        intent_allowed=f"{model.policy.intent_gpu_hours_per_hour:g}",
        slo=slo_words(f),
        slo_below_target=f.slo_attainment is not None and f.slo_target is not None and f.slo_attainment < f.slo_target,
    )


def slo_words(f: ModelForesight) -> str | None:
    """The model's recent objective attainment and its target, as the Models page and `berth models show` say it."""
    if f.slo_attainment is None:
        return None
    target = "" if f.slo_target is None else f" (target {f.slo_target:.1%})"
    return f"{f.slo_attainment:.1%} of recent grants predicted within their latency objectives{target}"


def _keep_alive_row(k: KeepAliveView) -> KeepAliveRow:
    kept = (
        f"unloaded at once, then kept until {duration(k.window_s)} idle"
        if k.prewarm_s > 0
        else f"{duration(k.window_s)} idle"
    )
    prewarm = f"at {duration(k.prewarm_s)} idle" if k.prewarm_s > 0 else "–"
    gaps = f"{k.gaps} idle gap{'' if k.gaps == 1 else 's'}"
    why = {
        "learned": f"learned from {gaps}",
        "break-even": f"break-even: kept until holding it has cost one cold start ({gaps} give no longer window)",
        "operator": "the operator's idle timeout",
    }[k.source]
    return KeepAliveRow(k.level, kept, prewarm, k.source, why)


def _prewarm_row(p: PrewarmView) -> PrewarmRow:
    used: PrewarmUsed
    if p.used_at is not None:
        used, text = "yes", f"yes, {duration((p.used_at - p.started_at).total_seconds())} after it started"
    elif p.ended_at is not None:
        used, text = "no", "no: ended unused"
    else:
        used, text = "not-yet", "not yet"
    return PrewarmRow(p.replica_id, p.started_at, p.reason, used, text, p.ended_at)
