"""The demo's tables read the model calls and interruptions as the union types them (orchestrator/demo)."""

from __future__ import annotations

from rich.console import Console

from orchestrator.demo.placements import interruptions_table, placements_table
from sdk.wire.task_events import Interruption, ModelCall


def rendered(table: object) -> str:
    console = Console(width=200, record=True)
    console.print(table)
    return console.export_text()


def test_a_call_on_the_fleet_says_where_and_why_and_one_off_it_says_provider() -> None:
    on_fleet = ModelCall(
        step=2, node_id="gpu-a", gpu_type="H100", gpu_indexes=[0, 1], tier="disk", decided_by="locality", load_s=3.25
    )
    off_fleet = ModelCall(step=3, served_by="openai", ttft_s=0.4)
    text = rendered(placements_table([("demo-t1", on_fleet), ("demo-t2", off_fleet)], prefix="demo-"))
    assert "H100 0,1" in text and "load from disk" in text and "locality" in text and "3.25" in text
    assert "openai" in text and "provider" in text and "0.40" in text


def test_an_interruption_row_has_its_node_kind_tokens_and_resume() -> None:
    cut = Interruption(step=4, node_id="spot-1", kind="notice", tokens_kept=40, tokens_lost=2, resumed_on="gpu-b")
    text = rendered(interruptions_table([("t", cut)]))
    assert "spot-1" in text and "notice" in text and "40" in text and "gpu-b" in text
