"""`@tool`: a typed Python function becomes something a model can call.

The signature is the schema: pydantic builds the JSON schema the model sees and validates
the arguments the model sends, so a bad call comes back to the model as a readable tool
error instead of a TypeError deep inside the author's code.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from ._errors import InvalidSpec
from ._spec import ToolSpec


@dataclass(frozen=True)
class ToolCallContext:
    """Where the current tool call comes from; `idempotency_key` is stable across retries."""

    task_id: str
    step: int
    call_id: str
    attempt: int

    @property
    def idempotency_key(self) -> str:
        return f"{self.task_id}/{self.step}/{self.call_id}"


_current_call: contextvars.ContextVar[ToolCallContext | None] = contextvars.ContextVar("berth_tool_call", default=None)


def tool_context() -> ToolCallContext:
    """The context of the tool call being served; use its idempotency key for side effects."""
    ctx = _current_call.get()
    if ctx is None:
        raise RuntimeError("tool_context() is only available while Berth runs a tool call")
    return ctx


class ToolArgumentError(ValueError):
    """The model's arguments do not fit the tool's signature."""


class Tool:
    """A function the model can call, with its schema and run settings."""

    def __init__(
        self, fn: Callable[..., Any], *, name: str | None, description: str | None, timeout_s: float, max_attempts: int
    ) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        self.is_async = inspect.iscoroutinefunction(fn)
        self._arguments = _arguments_model(fn, self.name)
        schema = self._arguments.model_json_schema()
        schema.pop("title", None)
        try:
            self.spec = ToolSpec(
                name=self.name,
                description=(description or inspect.getdoc(fn) or "").strip(),
                parameters=schema,
                timeout_s=timeout_s,
                max_attempts=max_attempts,
            )
        except ValidationError as exc:
            err = exc.errors()[0]
            raise InvalidSpec(f"tool {self.name!r}: {err['msg']}", field=f"tools.{self.name}") from exc

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def parse_arguments(self, arguments: str) -> dict[str, Any]:
        try:
            raw = json.loads(arguments or "{}")
        except json.JSONDecodeError as exc:
            raise ToolArgumentError(f"arguments are not valid JSON: {exc.msg}") from exc
        if not isinstance(raw, dict):
            raise ToolArgumentError("arguments must be a JSON object")
        try:
            parsed = self._arguments.model_validate(raw)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors())
            raise ToolArgumentError(problems) from exc
        return {field: getattr(parsed, field) for field in type(parsed).model_fields}

    async def invoke(self, arguments: str, context: ToolCallContext) -> str:
        """Validate, run (sync tools in a thread) and render the result as text for the model."""
        kwargs = self.parse_arguments(arguments)
        token = _current_call.set(context)
        try:
            if self.is_async:
                result = await self.fn(**kwargs)
            else:
                ctx = contextvars.copy_context()
                result = await asyncio.to_thread(ctx.run, functools.partial(self.fn, **kwargs))
        finally:
            _current_call.reset(token)
        return render_result(result)


def render_result(result: Any) -> str:
    if isinstance(result, str):
        return result
    if isinstance(result, BaseModel):
        return result.model_dump_json()
    try:
        return json.dumps(result, default=str)
    except (TypeError, ValueError):
        return str(result)


def _arguments_model(fn: Callable[..., Any], name: str) -> type[BaseModel]:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise InvalidSpec(f"tool {name!r}: cannot read its signature ({exc})", field=f"tools.{name}") from exc
    fields: dict[str, Any] = {}
    hints = _type_hints(fn)
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise InvalidSpec(f"tool {name!r}: *args/**kwargs cannot be described to a model", field=f"tools.{name}")
        if param.name not in hints:
            raise InvalidSpec(
                f"tool {name!r}: parameter {param.name!r} needs a type annotation", field=f"tools.{name}.{param.name}"
            )
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (hints[param.name], default)
    try:
        model = create_model(f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
        model.model_json_schema()
    except Exception as exc:  # pydantic raises several types for an unsupported annotation
        raise InvalidSpec(f"tool {name!r}: cannot build a JSON schema ({exc})", field=f"tools.{name}") from exc
    return model


def _type_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    import typing

    try:
        hints = typing.get_type_hints(
            fn, include_extras=True
        )  # keeps Annotated[..., Field(...)]: constraints, descriptions
    except Exception as exc:
        raise InvalidSpec(
            f"tool {fn.__name__!r}: cannot resolve annotations ({exc})", field=f"tools.{fn.__name__}"
        ) from exc
    hints.pop("return", None)
    return hints


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float = 60.0,
    max_attempts: int = 3,
) -> Any:
    """Make a typed function (sync or async) callable by the model: `@tool` or `@tool(timeout_s=10)`."""

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool(f, name=name, description=description, timeout_s=timeout_s, max_attempts=max_attempts)

    return wrap(fn) if fn is not None else wrap
