"""The scaler's foresight as operators read it: per model, its keep-alive per level, its pre-warms and how many
of its recent grants were predicted to meet their latency objectives.

The pool times everything on its monotonic clock; a reader wants wall-clock times, so each is placed
back from "now" on both clocks. Models appear once the scaler has planned for them.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sdk.wire.catalogue import KeepAliveView, ModelForesight, PrewarmView

from .scaler import Foresight


def foresight_views(foresight: Foresight, clock_now: float, wall_now: datetime) -> dict[str, ModelForesight]:
    def wall(at: float | None) -> datetime | None:
        return None if at is None else wall_now - timedelta(seconds=clock_now - at)

    book = foresight.intents
    pending = book.due(clock_now) if book is not None else {}
    models = set(foresight.keep_alive) | set(pending) | (set(book.prewarms) if book is not None else set())
    traffic = foresight.traffic
    views: dict[str, ModelForesight] = {}
    for model in sorted(models):
        prewarms = list(book.prewarms.get(model, ())) if book is not None else []
        judged = traffic.serves_interactive(model, clock_now)
        views[model] = ModelForesight(
            keep_alive=[
                KeepAliveView(level=i + 1, window_s=k.window_s, prewarm_s=k.prewarm_s, source=k.source, gaps=k.gaps)
                for i, k in enumerate(foresight.keep_alive.get(model, []))
            ],
            prewarms=[
                PrewarmView(
                    replica_id=p.replica_id,
                    started_at=wall(p.started_at),
                    reason=p.reason,
                    used_at=wall(p.used_at),
                    ended_at=wall(p.ended_at),
                )
                for p in reversed(prewarms)
            ],
            announced=len(pending.get(model, [])),
            intent_gpu_hours_last_hour=round(book.spent_gpu_hours(model, clock_now), 4) if book is not None else 0.0,
            slo_attainment=round(traffic.attainment(model, clock_now).share, 4) if judged else None,
            slo_target=traffic.target(model, clock_now) if judged else None,
            updated_at=wall_now,
        )
    return views
