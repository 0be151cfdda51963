"""`McpServer`: an MCP server whose tools an agent may call, declared beside its own tools.

The tool worker starts (stdio) or reaches (streamable HTTP) the server, so the declaration
says how: a `command`, or a `url`, never both. `env` and `headers` usually carry the
server's credentials; they stay in the author's process and are left out of every dump of
the spec, so they never reach the control plane's store, its API or workflow history.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from .wire.limits import numbers_not_booleans

# A server's name prefixes its tools' names (`<server>__<tool>`, at most 64 characters for an
# OpenAI tool), so it is an agent name without dots (not allowed in tool names), 32 at most
# (which leaves 30 for the tool's own name).
MCP_SERVER_NAME_PATTERN = r"^[a-z][a-z0-9_-]{0,31}$"
# A berth_token server runs per task. A running task calls its tools every step, seconds to minutes
# apart: five minutes without a call means it has ended or waits (for a human, for budget).
IDLE_CLOSE_S = 300.0


class McpServer(BaseModel):
    """A stdio MCP server (`command`, with `env` and `cwd`) or a streamable-HTTP one (`url`, with `headers`).

    Each of its tools is offered to the model as `<name>__<tool>` and runs, like a native tool,
    as an activity on the agent's queue with `timeout_s` per attempt and up to `max_attempts`.
    `berth_token=True` (stdio only) runs the server once per task, with BERTH_API_URL and a
    BERTH_API_KEY scoped to that task, so what it does through Berth is paid by that task.
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=MCP_SERVER_NAME_PATTERN, description="prefix of its tools' names")
    command: list[str] | None = Field(default=None, min_length=1, description="argv of a stdio server")
    env: dict[str, str] = Field(
        default_factory=dict,
        exclude=True,
        repr=False,
        description="extra environment of a stdio server; never leaves this process",
    )
    cwd: str | None = Field(default=None, description="working directory of a stdio server")
    url: str | None = Field(default=None, validate_default=True, description="endpoint of a streamable-HTTP server")
    headers: dict[str, str] = Field(
        default_factory=dict,
        exclude=True,
        repr=False,
        description="HTTP headers sent to a url server; never leave this process",
    )
    berth_token: bool = Field(default=False, description="a stdio server per task, holding that task's token")
    timeout_s: float = Field(default=60.0, gt=0, le=24 * 3600, description="per attempt of each call")
    max_attempts: int = Field(default=3, ge=1, le=100)

    _numbers = numbers_not_booleans("timeout_s", "max_attempts")

    @field_validator("command")
    @classmethod
    def _command_names_a_program(cls, command: list[str] | None) -> list[str] | None:
        if command is not None and not command[0].strip():
            raise ValueError("the first item is the program to run; it is blank")
        return command

    @field_validator("env", "cwd")
    @classmethod
    def _stdio_only(cls, value: object, info: ValidationInfo) -> object:
        if value and "command" in info.data and info.data["command"] is None:
            raise ValueError("only a stdio server (one with a command) has one")
        return value

    @field_validator("url")
    @classmethod
    def _exactly_one_transport(cls, url: str | None, info: ValidationInfo) -> str | None:
        if "command" not in info.data:
            return url  # command was refused already; that error says enough
        has_command = info.data["command"] is not None
        if has_command == (url is not None):
            raise ValueError(
                "give exactly one of command (a stdio server) or url (a streamable-HTTP server)"
                + ("; both were given" if has_command else "")
            )
        if url is not None and not url.startswith(("http://", "https://")):
            raise ValueError("an MCP server's url starts with http:// or https://")
        return url

    @field_validator("headers")
    @classmethod
    def _url_only(cls, headers: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        if headers and "url" in info.data and info.data["url"] is None:
            raise ValueError("only a streamable-HTTP server (one with a url) is sent headers")
        return headers

    @field_validator("berth_token")
    @classmethod
    def _token_for_stdio(cls, berth_token: bool, info: ValidationInfo) -> bool:
        if berth_token and "command" in info.data and info.data["command"] is None:
            raise ValueError("only a stdio server can be given a task's token (through its environment)")
        return berth_token

    @property
    def where(self) -> str:
        """The server's address for messages: its program, or its URL without what may hold a key
        (user info, query, fragment)."""
        if self.command is not None:
            return self.command[0]
        assert self.url is not None
        parts = urlsplit(self.url)
        host = parts.netloc.rpartition("@")[2]
        return urlunsplit((parts.scheme, host, parts.path, "", ""))


@dataclass(frozen=True)
class BerthAccess:
    """How a `berth_token` server reaches Berth: the API's URL and a way to get a task's token.

    `own_key` (the tool worker's key) is given only to the run that lists the server's tools
    when the worker starts, which acts for no task.
    """

    api_url: str
    task_token: Callable[[str], Awaitable[str]]
    own_key: str | None = None

    def env(self, key: str | None) -> dict[str, str]:
        return {"BERTH_API_URL": self.api_url, **({"BERTH_API_KEY": key} if key else {})}
