"""One bound per field, wherever a client sends it: the MCP tools take what /v1 takes, no more and no less.

Each MCP tool's JSON schema is compared with the schema of the API model its call ends in, for the fields both
name; a bound set in one place and not the other (a 500-character reason in MCP, none on /v1) fails here.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from orchestrator.api.admission import SubmitRequest
from orchestrator.api.loop_approvals import ApproveBody, RejectBody
from orchestrator.api.tasks import AnswerRequest, CancelBody, RaiseBudgetRequest
from orchestrator.mcp_server import build_server
from sdk import Budget
from sdk.wire.resources import ForkRequest

BOUNDS = ("maxLength", "minLength", "maximum", "minimum", "exclusiveMinimum", "exclusiveMaximum", "pattern")


def _bounds(schema: dict[str, Any]) -> dict[str, Any]:
    """The bounds of one property, an optional one's (anyOf [T, null]) included."""
    found = {k: schema[k] for k in BOUNDS if k in schema}
    for option in schema.get("anyOf", []):
        found |= {k: option[k] for k in BOUNDS if k in option}
    return found


def _api(model: type[BaseModel], field: str) -> dict[str, Any]:
    return _bounds(model.model_json_schema()["properties"][field])


@pytest.fixture(scope="module")
async def tools() -> dict[str, dict[str, Any]]:
    def no_client() -> Any:
        raise AssertionError("listing the tools calls no API")

    listed = await build_server(no_client).list_tools()
    return {tool.name: tool.input_schema["properties"] for tool in listed}


@pytest.mark.parametrize(
    ("tool", "argument", "model", "field"),
    [
        ("submit_task", "agent", SubmitRequest, "agent"),
        ("submit_task", "input", SubmitRequest, "input"),
        ("submit_task", "priority", SubmitRequest, "priority"),
        ("submit_task", "task_id", SubmitRequest, "task_id"),
        ("submit_task", "budget_tokens", Budget, "tokens"),
        ("submit_task", "budget_usd", Budget, "usd"),
        ("cancel_task", "reason", CancelBody, "reason"),
        ("raise_budget", "tokens", RaiseBudgetRequest, "tokens"),
        ("answer_task", "text", AnswerRequest, "text"),
        ("approve_tool_call", "call_id", ApproveBody, "call_id"),
        ("reject_tool_call", "call_id", RejectBody, "call_id"),
        ("reject_tool_call", "reason", RejectBody, "reason"),
        ("fork_task", "checkpoint_seq", ForkRequest, "checkpoint_seq"),
        ("fork_task", "model", ForkRequest, "model"),
        ("fork_task", "input", ForkRequest, "input"),
        ("fork_task", "max_steps", ForkRequest, "max_steps"),
        ("fork_task", "new_task_id", ForkRequest, "task_id"),
        ("fork_task", "budget_tokens", Budget, "tokens"),
    ],
)
def test_an_mcp_argument_is_bounded_as_the_api_field_it_becomes(
    tools: dict[str, dict[str, Any]], tool: str, argument: str, model: type[BaseModel], field: str
) -> None:
    assert _bounds(tools[tool][argument]) == _api(model, field)
