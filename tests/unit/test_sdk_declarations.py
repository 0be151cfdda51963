"""Agents, tools and specs refuse bad input at declaration, naming the field."""

from __future__ import annotations

import asyncio
import hashlib
from datetime import timedelta
from typing import Annotated

import pytest
from pydantic import BaseModel, Field, ValidationError

from sdk import Agent, AgentSpec, Budget, InvalidSpec, LatencyObjectives, ModelSettings, TaskSpec, tool
from sdk._tool import ToolArgumentError, ToolCallContext


@tool
def search(query: str, limit: int = 3) -> str:
    """Search the knowledge base."""
    return f"{query}:{limit}"


def test_tool_schema_comes_from_the_signature() -> None:
    assert search.spec.description == "Search the knowledge base."
    assert search.spec.parameters["required"] == ["query"]
    assert search.spec.parameters["properties"]["limit"]["type"] == "integer"
    assert search("x") == "x:3"


def test_tool_arguments_are_validated() -> None:
    assert search.parse_arguments('{"query": "a"}') == {"query": "a", "limit": 3}
    for bad, reason in [
        ('{"limit": 2}', "query"),
        ("not json", "JSON"),
        ('{"query": "a", "x": 1}', "x"),
        ("[1]", "object"),
    ]:
        with pytest.raises(ToolArgumentError, match=reason):
            search.parse_arguments(bad)


def test_async_and_sync_tools_run_with_their_context() -> None:
    from sdk import tool_context

    @tool
    async def whoami() -> dict:
        """Returns the idempotency key."""
        return {"key": tool_context().idempotency_key}

    out = asyncio.run(whoami.invoke("{}", ToolCallContext("t1", 3, "c9", 1)))
    assert out == '{"key": "t1/3/c9"}'
    assert asyncio.run(search.invoke('{"query": "q"}', ToolCallContext("t", 1, "c", 1))) == "q:3"


def test_a_tool_schema_that_cannot_be_built_is_refused() -> None:
    with pytest.raises(InvalidSpec) as no_annotation:

        @tool
        def f(x) -> str:  # type: ignore[no-untyped-def]
            return ""

    assert no_annotation.value.field == "tools.f.x"

    with pytest.raises(InvalidSpec):

        @tool
        def g(*items: str) -> str:
            return ""

    class NotAModel:
        pass

    with pytest.raises(InvalidSpec):

        @tool
        def h(x: NotAModel) -> str:
            return ""


def test_agent_validation_names_the_field() -> None:
    with pytest.raises(InvalidSpec) as bad_name:
        Agent("Bad Name!", "llama-3.1-8b")
    assert bad_name.value.field == "name"
    with pytest.raises(InvalidSpec) as bad_steps:
        Agent("ok", "llama-3.1-8b", max_steps=0)
    assert bad_steps.value.field == "max_steps"
    with pytest.raises(InvalidSpec):
        Agent("ok", "llama-3.1-8b", tools=[search, search])
    with pytest.raises(InvalidSpec):
        Agent("ok", "llama-3.1-8b", tools=[lambda: 1])  # type: ignore[list-item]


def test_agent_version_is_a_content_hash() -> None:
    a, b = Agent("a", "llama-3.1-8b", "x", [search]), Agent("a", "llama-3.1-8b", "x", [search])
    c = Agent("a", "llama-3.1-8b", "y", [search])
    assert a.spec().version == b.spec().version != c.spec().version


@pytest.mark.parametrize(
    "fields, where",
    [
        ({"budget": {"tokens": 0}}, "budget.tokens"),
        ({"budget": {"tokens": 10**12}}, "budget.tokens"),
        ({"budget": {"tokens": 10, "usd": -1}}, "budget.usd"),
        ({"input": ""}, "input"),
        ({"input": "   "}, "input"),
        ({"input": "x" * 300_000}, "input"),
        ({"agent": "Not/Valid"}, "agent"),
        ({"task_id": "has space"}, "task_id"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_task_spec_refusals_name_the_field(fields: dict, where: str) -> None:
    body = {"agent": "research", "input": "hello", "budget": {"tokens": 100}} | fields
    with pytest.raises(ValidationError) as refused:
        TaskSpec.model_validate(body)
    locs = {".".join(map(str, e["loc"])) for e in refused.value.errors()}
    assert where in locs


def test_budget_accepts_a_relative_deadline() -> None:
    budget = Budget(100, deadline=timedelta(minutes=5))
    assert budget.deadline is not None and budget.deadline.tzinfo is not None
    with pytest.raises(InvalidSpec) as past:
        Budget(100, deadline=timedelta(seconds=-1))
    assert past.value.field == "budget.deadline"
    assert isinstance(budget, BaseModel)


@pytest.mark.parametrize(
    "make, field, reason",
    [
        (lambda: Budget(0), "budget.tokens", "greater than 0"),
        (lambda: Budget(100, usd=-1), "budget.usd", "greater than 0"),
        (lambda: Budget(100, surprise=1), "budget.surprise", "not permitted"),
    ],
)
def test_a_bad_budget_is_refused_as_invalid_spec_naming_the_field_in_its_text(make, field: str, reason: str) -> None:
    with pytest.raises(InvalidSpec) as refused:
        make()
    assert refused.value.field == field
    assert str(refused.value).startswith(f"{field}: ") and reason in str(refused.value)
    assert not str(refused.value.message).startswith(field)  # .message is the reason alone


def test_every_refusals_text_names_its_field_once() -> None:
    with pytest.raises(InvalidSpec) as bad_name:
        Agent("Bad Name!", "llama-3.1-8b")
    assert str(bad_name.value).startswith("name: ")
    assert str(InvalidSpec("tools.f: already named", field="tools.f")) == "tools.f: already named"


def test_annotated_tool_parameters_keep_their_constraints_and_descriptions() -> None:
    @tool
    def lookup(
        ticket: Annotated[str, Field(pattern=r"^[A-Z]+-[0-9]+$", description="a ticket key like BER-12")],
        depth: Annotated[int, Field(ge=1, le=5, description="how many links to follow")] = 1,
    ) -> str:
        """Look a ticket up."""
        return f"{ticket}@{depth}"

    properties = lookup.spec.parameters["properties"]
    assert properties["ticket"]["pattern"] == r"^[A-Z]+-[0-9]+$"
    assert properties["ticket"]["description"] == "a ticket key like BER-12"
    assert (properties["depth"]["minimum"], properties["depth"]["maximum"]) == (1, 5)
    assert lookup.parse_arguments('{"ticket": "BER-12", "depth": 2}') == {"ticket": "BER-12", "depth": 2}
    with pytest.raises(ToolArgumentError, match="ticket"):
        lookup.parse_arguments('{"ticket": "not a key"}')
    with pytest.raises(ToolArgumentError, match="depth"):
        lookup.parse_arguments('{"ticket": "BER-1", "depth": 9}')


@pytest.mark.parametrize(
    "settings, field",
    [
        ({"temperature": 2.5}, "settings.temperature"),
        ({"top_p": 0}, "settings.top_p"),
        ({"seed": -1}, "settings.seed"),
        ({"seed": True}, "settings.seed"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "settings.stop"),
        ({"stop": [""]}, "settings.stop"),
        ({"temprature": 1}, "settings.temprature"),
    ],
)
def test_bad_model_settings_are_refused_at_declaration_naming_the_field(settings: dict, field: str) -> None:
    with pytest.raises(InvalidSpec) as refused:
        Agent("ok", "llama-3.1-8b", settings=settings)  # type: ignore[arg-type]
    assert refused.value.field == field


def test_a_tasks_settings_override_its_agents_field_by_field_and_only_set_ones_are_sent() -> None:
    agent = ModelSettings(temperature=0.2, stop="END", seed=3)
    task = ModelSettings(temperature=0.9, top_p=0.5)
    assert agent.chosen() == {"temperature": 0.2, "stop": ["END"], "seed": 3}
    assert task.over(agent).chosen() == {"temperature": 0.9, "top_p": 0.5, "stop": ["END"], "seed": 3}
    assert task.over(None) == task


def test_an_agent_without_settings_keeps_the_version_it_had_before_settings_existed() -> None:
    plain = Agent("a", "llama-3.1-8b", "x", [search])
    body = plain.spec().model_dump_json(
        exclude={"version", "mcp_servers", "settings", "output_schema", "loop", "loop_idle_s", "objectives"}
    )
    assert plain.spec().version == hashlib.sha256(body.encode()).hexdigest()[:12]
    own = AgentSpec(name="a", model="llama-3.1-8b", loop="own")
    assert own.content_version() != AgentSpec(name="a", model="llama-3.1-8b").content_version()
    tuned = Agent("a", "llama-3.1-8b", "x", [search], settings=ModelSettings(temperature=0))
    typed = Agent("a", "llama-3.1-8b", "x", [search], output_type=ModelSettings)
    quick = Agent("a", "llama-3.1-8b", "x", [search], objectives=LatencyObjectives(ttft_s=0.5))
    assert len({plain.spec().version, tuned.spec().version, typed.spec().version, quick.spec().version}) == 4
