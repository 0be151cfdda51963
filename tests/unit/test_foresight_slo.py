"""The pool's recent objective attainment per model reaches the Models page: foresight views carry it from the
traffic book, and the page words it against its target."""

from __future__ import annotations

from datetime import UTC, datetime

from orchestrator.pool.foresight_view import foresight_views
from orchestrator.pool.scaler import Foresight
from orchestrator.ui.foresight import foresight_view
from sdk import CatalogueModel, ModelEntry, ScalingPolicy
from sdk.wire.catalogue import ModelForesight

NOW = datetime(2025, 1, 1, tzinfo=UTC)


def test_a_models_foresight_view_carries_its_recent_attainment_and_target() -> None:
    foresight = Foresight()
    foresight.keep_alive = {"judged": [], "unjudged": []}
    for met in (True, True, True, False):
        foresight.traffic.granted("judged", 100.0, met, fixable=False, target=0.99)

    views = foresight_views(foresight, 110.0, NOW)
    assert (views["judged"].slo_attainment, views["judged"].slo_target) == (0.75, 0.99)
    assert (views["unjudged"].slo_attainment, views["unjudged"].slo_target) == (None, None)

    later = foresight_views(foresight, 110.0 + foresight.traffic.attainment_window_s, NOW)
    assert later["judged"].slo_attainment is None  # the grants have left the window


def test_the_models_page_words_attainment_against_its_target() -> None:
    def shown(attainment: float | None) -> tuple[str | None, bool]:
        f = ModelForesight(
            slo_attainment=attainment, slo_target=0.99 if attainment is not None else None, updated_at=NOW
        )
        view = foresight_view(
            CatalogueModel(entry=ModelEntry(name="m", weights_gib=16), policy=ScalingPolicy(), foresight=f)
        )
        assert view is not None
        return view.slo, view.slo_below_target

    assert shown(0.75) == ("75.0% of recent grants predicted within their latency objectives (target 99.0%)", True)
    assert shown(1.0) == ("100.0% of recent grants predicted within their latency objectives (target 99.0%)", False)
    assert shown(None) == (None, False)
