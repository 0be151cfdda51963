"""Dollars read the same in the CLI and the UI: a self-hosted step's millionths are not rounded away."""

from __future__ import annotations

import pytest

from orchestrator.money import usd_text


@pytest.mark.parametrize(
    "value, text",
    [
        (None, "–"),
        (0, "$0"),
        (0.000042, "$0.000042"),
        (0.0099999, "$0.010000"),
        (0.5, "$0.5000"),
        (12.3, "$12.30"),
        (1234.5, "$1,234.50"),
    ],
)
def test_a_fraction_of_a_cent_keeps_six_decimals(value: float | None, text: str) -> None:
    assert usd_text(value) == text


def test_the_cli_and_the_ui_use_the_one_rule() -> None:
    from orchestrator.cli import output
    from orchestrator.ui import rendering

    assert output.usd_text is usd_text is rendering.usd_text
