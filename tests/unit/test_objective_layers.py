"""A task's latency objectives: its class's defaults under its tenant's, its agent's and its own settings, the most
specific winning field by field; a null inherits wherever a layer comes from; a tenant's change merges."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from orchestrator.pool.service import _placement_request
from sdk import AgentSpec, LatencyObjectives, TaskSpec
from sdk.wire.lease import LeaseRequest
from sdk.wire.objective_layers import describe, effective, layer, patched
from sdk.wire.objectives import DEFAULT_OBJECTIVES
from sdk.wire.task_run import TaskRun

TENANT = LatencyObjectives(ttft_s=3.0, tpot_s=0.2, deadline_s=900.0, attainment=0.9)
AGENT = LatencyObjectives(ttft_s=2.0, tpot_s=0.1)
TASK = LatencyObjectives(ttft_s=0.5)


def test_each_field_comes_from_the_most_specific_layer_that_sets_it() -> None:
    assert effective("interactive", TENANT, AGENT, TASK) == LatencyObjectives(
        ttft_s=0.5, tpot_s=0.1, deadline_s=900.0, attainment=0.9
    )
    assert effective("interactive", TENANT, AGENT, None) == LatencyObjectives(
        ttft_s=2.0, tpot_s=0.1, deadline_s=900.0, attainment=0.9
    )
    assert effective("interactive", TENANT, None, None) == TENANT
    # What no layer sets is the class's default.
    assert effective("interactive", None, None, TASK) == DEFAULT_OBJECTIVES["interactive"].model_copy(
        update={"ttft_s": 0.5}
    )
    assert effective("batch", None, None, None) == DEFAULT_OBJECTIVES["batch"]
    assert effective("low_priority", None, AGENT, None) == LatencyObjectives(ttft_s=2.0, tpot_s=0.1)


def test_a_null_inherits_as_a_field_left_out_does_even_in_a_layer_read_back_from_json() -> None:
    stored = AgentSpec(name="a", model="m", objectives=LatencyObjectives(ttft_s=2.0)).model_dump_json()
    read_back = AgentSpec.model_validate_json(stored).objectives
    assert read_back is not None and read_back.model_fields_set == set(LatencyObjectives.model_fields)
    assert effective("interactive", TENANT, read_back, None).tpot_s == TENANT.tpot_s  # not cleared by its null
    sent = LatencyObjectives.model_validate({"ttft_s": None, "tpot_s": 0.3})
    assert effective("interactive", None, None, sent) == DEFAULT_OBJECTIVES["interactive"].model_copy(
        update={"tpot_s": 0.3}
    )
    assert layer(LatencyObjectives.model_validate({"ttft_s": None})) is None


def test_a_change_merges_field_by_field_and_a_null_clears_one_or_all() -> None:
    assert patched(TENANT, LatencyObjectives(ttft_s=1.0)) == TENANT.model_copy(update={"ttft_s": 1.0})
    assert patched(AGENT, LatencyObjectives.model_validate({"ttft_s": None})) == LatencyObjectives(tpot_s=0.1)
    assert patched(LatencyObjectives(ttft_s=1.0), LatencyObjectives.model_validate({"ttft_s": None})) is None
    assert patched(TENANT, None) is None
    assert patched(None, LatencyObjectives(attainment=0.95)) == LatencyObjectives(attainment=0.95)


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"ttft_s": 0}, "objectives.ttft_s"),
        ({"tpot_s": -0.1}, "objectives.tpot_s"),
        ({"deadline_s": 10**9}, "objectives.deadline_s"),
        ({"attainment": 1.0}, "objectives.attainment"),
        ({"ttft_s": "soon"}, "objectives.ttft_s"),
        ({"p99": 1.0}, "objectives.p99"),
    ],
)
def test_a_bad_objective_of_a_task_is_refused_naming_it(values: dict, field: str) -> None:
    with pytest.raises(ValidationError) as refused:
        TaskSpec(agent="a", input="x", budget={"tokens": 100}, objectives=values)
    assert ".".join(str(p) for p in refused.value.errors()[0]["loc"]) == field


def test_the_run_s_objectives_reach_the_pool_s_placement_request() -> None:
    asked = LeaseRequest(task_id="t", step=1, model="m", tokens=10, objectives=AGENT)
    assert _placement_request(asked, 4).objectives == AGENT
    assert _placement_request(asked.model_copy(update={"objectives": None}), 4).objectives is None
    # A run from before tasks carried objectives reads as none (its history has no such field).
    old = {"task_id": "t", "spec": TaskSpec(agent="a", input="x", budget={"tokens": 9}).model_dump()}
    run = TaskRun.model_validate({**old, "agent": {"name": "a", "model": "m"}, "submitted_at": datetime.now(UTC)})
    assert run.objectives is None


def test_objectives_read_as_one_line() -> None:
    assert (
        describe(DEFAULT_OBJECTIVES["interactive"]) == "first token ≤ 1 s, ≤ 50 ms a token after it, for 99% of calls"
    )
    assert describe(DEFAULT_OBJECTIVES["batch"]) == "answer within 1 h, attainment 95%"
    assert describe(DEFAULT_OBJECTIVES["low_priority"]) == describe(None) == "none"
    assert describe(LatencyObjectives(ttft_s=0.25, deadline_s=300)) == "first token ≤ 250 ms, answer within 5 min"
