"""Typed exceptions that carry the server's reason, so callers can branch on them."""

from __future__ import annotations

from pydantic import ValidationError


class BerthError(Exception):
    """Base of every error the SDK raises."""

    def __init__(self, message: str, *, field: str | None = None, status_code: int | None = None) -> None:
        # Its text names the field too (`.message` is the reason alone): a log line or a traceback shows
        # what was wrong, not only `.field`.
        named = field is not None and not message.startswith(f"{field}:")
        super().__init__(f"{field}: {message}" if named else message)
        self.message = message
        self.field = field
        self.status_code = status_code


class InvalidSpec(BerthError):
    """The server (or the SDK, before sending) refused a spec; `field` names what was wrong."""

    @classmethod
    def from_validation(cls, exc: ValidationError) -> InvalidSpec:
        """A local pydantic refusal, worded like the server's (first problem, dotted field)."""
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or None
        return cls(first["msg"], field=field)


class NotFound(BerthError):
    """The task, agent or checkpoint does not exist (or is not visible to this caller)."""


class Conflict(BerthError):
    """The request contradicts the current state (e.g. a reused task id with another spec)."""


class Unauthorized(BerthError):
    """The API key is missing, unknown or revoked (401); `Forbidden` when it is valid but may not do this."""


class Forbidden(Unauthorized):
    """The API key is valid but its role or tenant may not make this call (403)."""


class TaskEnded(BerthError):
    """A task ended without a result; subclasses say how. `state` is the final TaskState."""

    def __init__(self, message: str, *, state: object = None) -> None:
        super().__init__(message)
        self.state = state


class BudgetExhausted(TaskEnded):
    """The task ran out of tokens, dollars or time; `state.result` holds its partial answer."""


class TaskFailed(TaskEnded):
    """The task failed (or hit max_steps) with an error it could not recover from."""


class TaskCancelled(TaskEnded):
    """The task was cancelled before it finished."""


class McpUnreachable(BerthError):
    """An agent's MCP server could not be started, reached or listed; `field` names it (`mcp_servers.<name>`)."""


class McpToolError(BerthError):
    """An MCP server answered a tool call with an error (`isError`, or a protocol error)."""


class SecretSettingRefused(BerthError, ValueError):
    """A secret setting that cannot be used: given both as its variable and as the file its `_FILE` variable
    names, or a file that cannot be read or is empty; `field` names the variable to fix."""
