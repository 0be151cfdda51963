"""Where an interrupted step goes next: the recovery rules, and exclusions that last a while, not for good."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from sdk._spec import TaskSpec
from sdk.wire.recovery import DEFAULT_RECOVERY, Avoid, Cut, avoid_after
from workflows.fleet_round import EXCLUDE_NODE_FOR, still_excluded

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_an_exclusion_ends_after_its_time_so_a_step_failed_by_every_node_is_not_stranded() -> None:
    excluded = {"gpu-b": T0 + timedelta(seconds=10), "gpu-a": T0}
    assert still_excluded(excluded, T0 + timedelta(seconds=11)) == ["gpu-a", "gpu-b"]
    assert still_excluded(excluded, T0 + EXCLUDE_NODE_FOR) == ["gpu-b"]
    assert still_excluded(excluded, T0 + EXCLUDE_NODE_FOR + timedelta(seconds=10)) == []


def test_the_recovery_rules_keep_a_step_away_from_what_went_away_and_no_further() -> None:
    spot = Cut("lost", "gpu-a", "east-1a", "spot")
    assert avoid_after(DEFAULT_RECOVERY, spot) == Avoid(frozenset({"gpu-a"}), frozenset({"east-1a"}))
    assert avoid_after(["avoid_node"], spot) == Avoid(frozenset({"gpu-a"}))
    assert avoid_after([], spot) == Avoid()
    # A busy node (its generation went quiet while it is provably alive) and a lost replica keep the step.
    assert avoid_after(DEFAULT_RECOVERY, Cut("stalled", "gpu-a", "east-1a", "spot")) == Avoid()
    assert avoid_after(DEFAULT_RECOVERY, Cut("replica_gone", "gpu-a", "east-1a", "spot")) == Avoid()
    # Only a spot node's reclaim says anything about its zone.
    assert avoid_after(DEFAULT_RECOVERY, Cut("notice", "gpu-b", "east-1b", "on-demand")).spot_zones == frozenset()


def test_a_task_names_its_recovery_rules_once_each_from_the_registry() -> None:
    spec = {"agent": "a", "input": "x", "budget": {"tokens": 100}}
    assert TaskSpec(**spec).recovery == list(DEFAULT_RECOVERY)
    assert TaskSpec(**spec, recovery=[]).recovery == []
    with pytest.raises(ValidationError, match="recovery"):
        TaskSpec(**spec, recovery=["avoid_node", "avoid_node"])
    with pytest.raises(ValidationError, match="recovery"):
        TaskSpec(**spec, recovery=["avoid_everything"])
