"""An agent's output type: its schema is refused where unusable, answers are checked, the simulated engine fills it."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field

from orchestrator.engines.simulated.structured import instance
from sdk import Agent, AgentSpec, InvalidSpec
from sdk.wire.output import answer_json, answer_problem, schema_problem


class Item(BaseModel):
    name: str = Field(min_length=3)
    tags: list[str] = Field(min_length=2)


class Report(BaseModel):
    title: str
    score: float = Field(gt=0.5)
    items: list[Item]
    note: str | None = None


SCHEMA = Report.model_json_schema()


def test_an_answer_is_read_bare_or_from_its_one_code_fence() -> None:
    assert answer_json(' {"a": 1} ') == '{"a": 1}'
    assert answer_json('```json\n{"a": 1}\n```') == '{"a": 1}'
    assert answer_json('```\n{"a": 1}\n```') == '{"a": 1}'
    assert answer_json("```a``` and ```b```") == "```a``` and ```b```"  # two fences: prose, left as it is


@pytest.mark.parametrize(
    "answer, problem",
    [
        ("Here it is: Report", "the answer is not JSON"),
        ('{"title": "t", "score": 0.2, "items": []}', "score: 0.2 is less than or equal to the minimum of 0.5"),
        (
            '{"title": "t", "score": 1, "items": [{"name": "ab", "tags": ["x", "y"]}]}',
            "items/0/name: 'ab' is too short",
        ),
        ('{"score": 1, "items": []}', "the answer: 'title' is a required property"),
    ],
)
def test_an_answer_that_does_not_match_says_where_and_why(answer: str, problem: str) -> None:
    assert problem in (answer_problem(answer, SCHEMA) or "")


def test_a_matching_answer_has_no_problem() -> None:
    assert (
        answer_problem('{"title": "t", "score": 0.9, "items": [{"name": "abc", "tags": ["x", "y"]}]}', SCHEMA) is None
    )


def test_an_unusable_schema_is_refused_at_declaration_and_registration() -> None:
    with pytest.raises(InvalidSpec) as not_a_model:
        Agent("a", "llama-3.1-8b", output_type=dict)  # type: ignore[arg-type]
    assert not_a_model.value.field == "output_type"
    assert schema_problem({"type": "array"}) is not None
    assert "not a JSON schema" in (schema_problem({"type": "object", "properties": {"x": {"type": "colour"}}}) or "")
    assert "more than" in (schema_problem({"type": "object", "description": "x" * 40_000}) or "")
    with pytest.raises(ValueError, match="output_schema"):
        AgentSpec(name="a", model="llama-3.1-8b", output_schema={"type": "object", "minProperties": "many"})


def test_the_simulated_engine_fills_a_schema_with_refs_bounds_and_optional_fields() -> None:
    filled = instance(SCHEMA, "Report on the fleet.\nMore prose.")
    assert answer_problem(Report.model_validate(filled).model_dump_json(), SCHEMA) is None
    assert filled["title"] == "Report on the fleet." and filled["score"] > 0.5
    assert filled["items"][0]["name"] == "Report on the fleet." and len(filled["items"][0]["tags"]) == 2
