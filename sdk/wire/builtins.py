"""The tools every agent may be given without writing them: sub-agents and humans.

The workflow runs these itself (a child workflow, a durable wait), so they need no tool
worker; only their schemas are shown to the model.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from .._spec import AgentSpec, ToolSpec
from .limits import MAX_INPUT_CHARS, MAX_TOKEN_BUDGET, NAME_PATTERN, numbers_not_booleans
from .tool_names import ASK_HUMAN_TOOL, SPAWN_AGENT_TOOL


class SpawnAgentArgs(BaseModel):
    agent: str = Field(pattern=NAME_PATTERN, description="name of a registered agent")
    input: str = Field(min_length=1, max_length=MAX_INPUT_CHARS, description="the sub-task")
    tokens: int | None = Field(default=None, gt=0, le=MAX_TOKEN_BUDGET, description="budget to carve out")

    _numbers = numbers_not_booleans("tokens")


class AskHumanArgs(BaseModel):
    question: str = Field(min_length=1, max_length=10_000)


SPAWN_AGENT_SPEC = ToolSpec(
    name=SPAWN_AGENT_TOOL,
    description="Run a sub-agent on a sub-task with a slice of this task's token budget; returns its answer.",
    parameters=SpawnAgentArgs.model_json_schema(),
)
ASK_HUMAN_SPEC = ToolSpec(
    name=ASK_HUMAN_TOOL,
    description="Ask the human operator a question and wait for the answer.",
    parameters=AskHumanArgs.model_json_schema(),
)


def tools_offered(agent: AgentSpec) -> list[ToolSpec]:
    """The agent's own tools plus the built-ins it is allowed, in the order the model sees them."""
    offered = list(agent.tools)
    if agent.allow_spawn:
        offered.append(SPAWN_AGENT_SPEC)
    if agent.allow_ask_human:
        offered.append(ASK_HUMAN_SPEC)
    return offered
