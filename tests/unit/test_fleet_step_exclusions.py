"""A node that failed a step keeps out of its placements for a while, not for good."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from workflows.fleet_step import EXCLUDE_NODE_FOR, still_excluded

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def test_an_exclusion_ends_after_its_time_so_a_step_failed_by_every_node_is_not_stranded() -> None:
    excluded = {"gpu-b": T0 + timedelta(seconds=10), "gpu-a": T0}
    assert still_excluded(excluded, T0 + timedelta(seconds=11)) == ["gpu-a", "gpu-b"]
    assert still_excluded(excluded, T0 + EXCLUDE_NODE_FOR) == ["gpu-b"]
    assert still_excluded(excluded, T0 + EXCLUDE_NODE_FOR + timedelta(seconds=10)) == []
