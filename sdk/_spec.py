"""What an agent is and what a task asks for: the contracts the API, workflow and SDK share."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ._budget import Budget
from ._mcp_server import McpServer
from ._settings import ModelSettings
from .wire.lease import ServiceClass
from .wire.limits import (
    MAX_INPUT_CHARS,
    MAX_MCP_SERVERS,
    MAX_MODEL_NAME_CHARS,
    MAX_MODEL_TOOLS,
    MAX_STEPS,
    MAX_TOKENS_PER_STEP,
    NAME_PATTERN,
    TASK_REF_PATTERN,
    StoredInt,
    numbers_not_booleans,
)
from .wire.objectives import LatencyObjectives
from .wire.output import schema_problem
from .wire.recovery import DEFAULT_RECOVERY, RECOVERY_RULES, RecoveryRule
from .wire.tool_names import ASK_HUMAN_TOOL, SPAWN_AGENT_TOOL

BUILTIN_TOOLS = (SPAWN_AGENT_TOOL, ASK_HUMAN_TOOL)
# The model is offered the agent's own tools and the built-ins in one request: 128 - 2 = 126 of its own.
MAX_AGENT_TOOLS = MAX_MODEL_TOOLS - len(BUILTIN_TOOLS)


class ToolSpec(BaseModel):
    """A tool as the model sees it (name, description, JSON schema) plus how it is run."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    timeout_s: float = Field(default=60.0, gt=0, le=24 * 3600)
    max_attempts: int = Field(default=3, ge=1, le=100)

    _numbers = numbers_not_booleans("timeout_s", "max_attempts")

    def to_openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


class AgentSpec(BaseModel):
    """A registered agent: everything a task needs to run it, versioned by content."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_PATTERN)
    version: str = Field(default="", description="content hash, filled in on registration")
    model: str = Field(min_length=1, max_length=MAX_MODEL_NAME_CHARS)
    instructions: str = Field(default="", max_length=MAX_INPUT_CHARS)
    tools: list[ToolSpec] = Field(default_factory=list, max_length=MAX_AGENT_TOOLS)
    max_steps: int = Field(default=50, ge=1, le=MAX_STEPS)
    max_tokens_per_step: int = Field(default=1024, ge=16, le=MAX_TOKENS_PER_STEP)
    allow_spawn: bool = False
    allow_ask_human: bool = False
    ask_human_timeout_s: float = Field(
        default=3600.0,
        gt=0,
        le=30 * 24 * 3600,
        allow_inf_nan=False,
        description="how long a question waits for its answer (30 days at most)",
    )
    mcp_servers: list[McpServer] = Field(
        default_factory=list,
        max_length=MAX_MCP_SERVERS,
        description="servers whose tools the tool worker offers as <server>__<tool>",
    )
    settings: ModelSettings | None = Field(
        default=None, description="how its model samples (temperature, top_p, stop, seed); unset: the engine's defaults"
    )
    output_schema: dict[str, Any] | None = Field(
        default=None, description="the JSON schema its final answer matches (from Agent's output_type)"
    )
    loop: Literal["berth", "own"] = Field(
        default="berth",
        description="whose loop runs the task: Berth's, or the"
        " author's own (an Agents SDK run) calling the model through Berth",
    )
    loop_idle_s: float = Field(
        default=3600.0,
        gt=0,
        le=30 * 24 * 3600,
        allow_inf_nan=False,
        description="an own loop silent this long has stopped: its task fails",
    )
    objectives: LatencyObjectives | None = Field(
        default=None,
        description="latency objectives of its tasks, over their tenant's field by field (a task's own win over"
        " these); unset: the tenant's, else the service class's defaults",
    )

    _numbers = numbers_not_booleans("max_steps", "max_tokens_per_step", "ask_human_timeout_s", "loop_idle_s")

    @property
    def task_queue(self) -> str:
        """Tools run on the author's own process, which polls this queue."""
        return f"agent/{self.name}"

    @field_validator("tools")
    @classmethod
    def _unique_tool_names(cls, tools: list[ToolSpec]) -> list[ToolSpec]:
        names = [t.name for t in tools]
        duplicated = _duplicated(names)
        if duplicated:
            raise ValueError(f"duplicate tool names: {', '.join(duplicated)}")
        reserved = sorted(set(names) & set(BUILTIN_TOOLS))
        if reserved:
            raise ValueError(f"tool names reserved for built-ins: {', '.join(reserved)}")
        return tools

    @model_validator(mode="after")
    def _own_loop_keeps_its_own_parts(self) -> AgentSpec:
        """An own loop offers its tools and writes its prompts itself: Berth's would never be used."""
        if self.loop == "own":
            used = [
                name
                for name in ("instructions", "tools", "mcp_servers", "output_schema", "allow_spawn", "allow_ask_human")
                if getattr(self, name)
            ]
            if used:
                raise ValueError(
                    f"{used[0]}: an agent whose loop is its own keeps it in that loop"
                    " (its tools, instructions and output type stay there)"
                )
        return self

    @field_validator("output_schema")
    @classmethod
    def _a_usable_schema(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        if schema is not None and (problem := schema_problem(schema)) is not None:
            raise ValueError(problem)
        return schema

    @field_validator("mcp_servers")
    @classmethod
    def _unique_server_names(cls, servers: list[McpServer]) -> list[McpServer]:
        duplicated = _duplicated([s.name for s in servers])
        if duplicated:
            raise ValueError(f"duplicate MCP server names: {', '.join(duplicated)}")
        return servers

    def content_version(self) -> str:
        """A short hash of the spec without its version, so re-registering the same code is a no-op.

        An agent without MCP servers, model settings or objectives hashes as it did before they existed, so its
        registered versions stay current.
        """
        import hashlib

        unset = {name for name in ("mcp_servers", "settings", "output_schema", "objectives") if not getattr(self, name)}
        if self.loop == "berth":
            unset |= {"loop", "loop_idle_s"}
        body = self.model_dump_json(exclude={"version", *unset})
        return hashlib.sha256(body.encode()).hexdigest()[:12]


def _duplicated(names: list[str]) -> list[str]:
    return sorted({n for n in names if names.count(n) > 1})


class CheckpointRef(BaseModel):
    """What the workflow keeps of its reasoning state: an id to find it and a hash to trust it."""

    id: StoredInt
    seq: StoredInt
    step: StoredInt
    hash: str


class ForkSource(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task_id: str
    checkpoint_seq: int = Field(ge=0)


class TaskSpec(BaseModel):
    """A submission: which agent, what input, under what budget, for whom."""

    model_config = ConfigDict(extra="forbid")

    task_id: str | None = Field(
        default=None,
        pattern=TASK_REF_PATTERN,
        description="the task's id (a client chooses one matching TASK_ID_PATTERN)",
    )
    agent: str = Field(pattern=NAME_PATTERN, description="registered agent name")
    input: str = Field(min_length=1, max_length=MAX_INPUT_CHARS)
    budget: Budget
    tenant: str = Field(default="default", pattern=NAME_PATTERN)
    priority: int = Field(default=0, ge=0, le=9, description="higher is served first when GPUs are short")
    service_class: ServiceClass = Field(
        default="interactive",
        description="interactive prefers on-demand GPUs; batch and low_priority prefer spot; low_priority never"
        " starts a replica",
    )
    model: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_MODEL_NAME_CHARS,
        description="override the agent's model (e.g. for a fork)",
    )
    max_steps: int | None = Field(default=None, ge=1, le=MAX_STEPS)
    settings: ModelSettings | None = Field(
        default=None, description="this task's model settings, over its agent's field by field"
    )
    max_interruptions: int = Field(
        default=50, ge=0, le=10_000, description="node losses and preemptions the task rides out (not errors)"
    )
    budget_grace_s: float | None = Field(default=None, gt=0, le=30 * 24 * 3600)
    recovery: list[RecoveryRule] = Field(
        default_factory=lambda: list(DEFAULT_RECOVERY),
        max_length=len(RECOVERY_RULES),
        description="what an interrupted step stays away from when it is placed again: avoid_node (the node that"
        " went away, for a while), avoid_spot_zone (the spot capacity of a zone a cloud reclaimed)",
    )
    objectives: LatencyObjectives | None = Field(
        default=None,
        description="this task's latency objectives, over its agent's and its tenant's field by field (a null"
        " field inherits); the rest come from its service class's defaults",
    )

    _numbers = numbers_not_booleans("priority", "max_steps", "max_interruptions", "budget_grace_s")

    @field_validator("recovery")
    @classmethod
    def _recovery_once_each(cls, value: list[str]) -> list[str]:
        repeated = sorted({rule for rule in value if value.count(rule) > 1})
        if repeated:
            raise ValueError(f"names {', '.join(repeated)} more than once")
        return value

    @field_validator("input")
    @classmethod
    def _input_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("input is blank")
        return value
