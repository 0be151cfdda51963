"""`Agent`: what an author declares; its spec is what the control plane registers."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ValidationError

from ._errors import InvalidSpec
from ._mcp_server import McpServer
from ._settings import ModelSettings
from ._spec import AgentSpec
from ._tool import Tool
from .wire.objectives import LatencyObjectives


class Agent:
    """An agent: a model, instructions and the tools it may call (its own, and its MCP servers').

    Validation happens here, at declaration, so a mistake is reported where it was made
    and not when the first task runs.
    """

    def __init__(
        self,
        name: str,
        model: str,
        instructions: str = "",
        tools: Iterable[Tool] = (),
        *,
        max_steps: int = 50,
        max_tokens_per_step: int = 1024,
        allow_spawn: bool = False,
        allow_ask_human: bool = False,
        ask_human_timeout_s: float = 3600.0,
        mcp_servers: Iterable[McpServer] = (),
        settings: ModelSettings | None = None,
        output_type: type[BaseModel] | None = None,
        objectives: LatencyObjectives | None = None,
    ) -> None:
        self.tools: dict[str, Tool] = {}
        for t in tools:
            if not isinstance(t, Tool):
                raise InvalidSpec(f"{t!r} is not a tool; decorate it with @tool", field="tools")
            if t.name in self.tools:
                raise InvalidSpec(f"two tools are named {t.name!r}", field=f"tools.{t.name}")
            self.tools[t.name] = t
        self.output_type = output_type
        try:
            self._spec = AgentSpec(
                name=name,
                model=model,
                instructions=instructions,
                tools=[t.spec for t in self.tools.values()],
                max_steps=max_steps,
                max_tokens_per_step=max_tokens_per_step,
                allow_spawn=allow_spawn,
                allow_ask_human=allow_ask_human,
                ask_human_timeout_s=ask_human_timeout_s,
                mcp_servers=list(mcp_servers),
                settings=settings,
                output_schema=_schema_of(output_type),
                objectives=objectives,
            )
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"]) or "agent"
            raise InvalidSpec(f"{field}: {err['msg']}", field=field) from exc
        self._spec = self._spec.model_copy(update={"version": self._spec.content_version()})

    @property
    def name(self) -> str:
        return self._spec.name

    def spec(self) -> AgentSpec:
        return self._spec.model_copy(deep=True)

    def __repr__(self) -> str:
        return f"Agent({self.name!r}, model={self._spec.model!r}, tools={list(self.tools)})"


def _schema_of(output_type: object) -> dict[str, Any] | None:
    """The JSON schema of an agent's output type, refusing (by name) anything that is not a pydantic model class:
    the annotation says what an author should pass, this checks what one did."""
    if output_type is None:
        return None
    if not (isinstance(output_type, type) and issubclass(output_type, BaseModel)):
        raise InvalidSpec(f"{output_type!r} is not a pydantic model class", field="output_type")
    try:
        return output_type.model_json_schema()
    except Exception as exc:  # pydantic raises several types for a model it cannot describe
        raise InvalidSpec(
            f"cannot build a JSON schema for {output_type.__name__} ({exc})", field="output_type"
        ) from exc
