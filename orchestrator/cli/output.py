"""How `berth` commands show things: rich tables, a live progress line, one-line errors.

Errors are printed plainly (not through rich) so that a refusal is always exactly one line,
`error: <field>: <reason>`, whatever the terminal width; scripts can grep it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TextIO

from pydantic import BaseModel
from rich.console import Console
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from sdk import (
    AgentSpec,
    ApiUnreachable,
    BerthError,
    CheckpointSummary,
    Client,
    Conflict,
    InvalidSpec,
    Ledger,
    NotFound,
    SecretSettingRefused,
    TaskEvent,
    TaskState,
    TaskStatus,
    Unauthorized,
)
from sdk.secret_settings import secret_setting
from sdk.wire.identity import API_KEY_ENV
from sdk.wire.objective_layers import describe
from sdk.wire.task_events import (
    InterruptionEvent,
    ModelCallEvent,
    StepRecordedEvent,
    TaskSnapshot,
    events_of,
    parse_event,
)

from ..config import BerthConfig
from ..money import usd_text

EXIT_OK = 0
EXIT_FAILED = 1  # the task did not complete, or the API could not be reached
EXIT_REFUSED = 2  # the request was invalid or refused (the same code argparse uses for bad usage)

_STATUS_STYLE = {
    TaskStatus.queued: "dim",
    TaskStatus.running: "cyan",
    TaskStatus.awaiting_budget: "yellow",
    TaskStatus.awaiting_input: "yellow",
    TaskStatus.completed: "green",
    TaskStatus.failed: "red",
    TaskStatus.cancelled: "magenta",
    TaskStatus.out_of_budget: "red",
    TaskStatus.max_steps: "red",
}


# Piped output (grep, CI logs) is not cut to 80 columns: a task id must survive whole.
_PIPE_WIDTH = 1000


def _console(stream: TextIO) -> Console:
    # Made per call: rich binds the stream when the Console is created, and tests (or a
    # caller) may have swapped sys.stdout since import.
    width = None if stream.isatty() else _PIPE_WIDTH
    return Console(file=stream, highlight=False, soft_wrap=True, width=width)


def stdout() -> Console:
    return _console(sys.stdout)


def stderr() -> Console:
    return _console(sys.stderr)


def add_output_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o",
        "--output",
        choices=("text", "json"),
        default="text",
        help="text for people (default), or json: the API's objects, for scripts and jq",
    )


def emit(args: argparse.Namespace, value: Any, show: Callable[[], None]) -> int:
    """Print `value` (models, lists of them, dicts of them) as plain JSON under `-o json`, else `show()` it."""
    if getattr(args, "output", "text") == "json":
        print(json.dumps(_plain(value), indent=2, ensure_ascii=False))
    else:
        show()
    return EXIT_OK


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def add_api_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--api",
        "--api-url",
        dest="api",
        metavar="URL",
        help="Berth API base URL (env BERTH_API_URL, default http://127.0.0.1:8080)",
    )
    parser.add_argument(
        "--api-key",
        metavar="KEY",
        help="API key (env BERTH_API_KEY, or a file BERTH_API_KEY_FILE names, else <data_dir>/admin-key when"
        " `berth up` made one)",
    )


def api_url(args: argparse.Namespace) -> str:
    return getattr(args, "api", None) or BerthConfig.load().resolved_api_url


def api_key(args: argparse.Namespace) -> str | None:
    """--api-key, else BERTH_API_KEY (or the file BERTH_API_KEY_FILE names), else the admin key `berth up` left in
    the data dir (the local stack's)."""
    given = getattr(args, "api_key", None) or secret_setting(API_KEY_ENV)
    if given:
        return given
    path = BerthConfig.load().admin_key_path
    try:
        return path.read_text().strip() or None
    except OSError:  # no stack of ours here, or not ours to read: the server will say a key is needed
        return None


def error_line(message: str, field: str | None = None) -> str:
    text = " ".join(str(message).split())  # one line, whatever the server's message holds
    return f"error: {field}: {text}" if field else f"error: {text}"


def fail(message: str, field: str | None = None, code: int = EXIT_REFUSED) -> int:
    print(error_line(message, field), file=sys.stderr)
    return code


def run_with_client(args: argparse.Namespace, command: Callable[[Client], Awaitable[int]]) -> int:
    """Run one command against the API and turn the SDK's exceptions into one line and an exit code."""
    # `berth` logs at INFO for its long-running processes; a client command's stderr is for
    # its progress and its one error line, not for a log line per HTTP request.
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)

    async def main() -> int:
        async with Client(api_url(args), api_key=api_key(args)) as client:
            return await command(client)

    try:
        return asyncio.run(main())
    except ApiUnreachable as exc:
        return fail(exc.message, code=EXIT_FAILED)
    except (InvalidSpec, NotFound, Conflict, Unauthorized, SecretSettingRefused) as exc:
        return fail(exc.message, exc.field)
    except BerthError as exc:
        return fail(exc.message, exc.field, code=EXIT_FAILED)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


# -- tables ------------------------------------------------------------------------------


def status_text(status: TaskStatus) -> Text:
    return Text(status.value, style=_STATUS_STYLE.get(status, ""))


def task_status_text(state: TaskState) -> Text:
    """The task's status, and that it is stuck when it is (the status is then only what it was doing)."""
    text = status_text(state.status)
    if state.stuck is not None:
        text.append(" stuck", style="bold red")
    return text


def tokens_text(state: TaskState) -> str:
    return f"{state.spend.tokens_used:,}/{state.spend.token_limit:,}"


def tasks_table(states: list[TaskState]) -> Table:
    table = Table(box=None, header_style="bold")
    for column in ("TASK", "AGENT", "STATUS", "STEP", "TOKENS", "USD", "TENANT", "UPDATED"):
        table.add_column(column, no_wrap=True)
    for s in states:
        table.add_row(
            s.task_id,
            s.agent,
            task_status_text(s),
            f"{s.step}/{s.max_steps}",
            tokens_text(s),
            usd_text(s.spend.usd_used),
            s.tenant,
            s.updated_at.strftime("%Y-%m-%d %H:%M:%S") if s.updated_at else "",
        )
    return table


def task_panel(
    state: TaskState, ledger: Ledger | None, checkpoints: int | None, interruptions: list[TaskEvent] | None = None
) -> Table:
    table = Table(box=None, show_header=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    spend = state.spend
    rows: list[tuple[str, Any]] = [
        ("task", state.task_id),
        ("status", task_status_text(state)),
        ("agent", f"{state.agent} ({state.agent_version or '-'})"),
        ("model", state.model),
        ("tenant", state.tenant),
        ("step", f"{state.step}/{state.max_steps}"),
        ("tokens", f"{tokens_text(state)} (remaining {spend.tokens_remaining:,}, lost {spend.tokens_lost:,})"),
        ("usd", usd_text(spend.usd_used) + (f" of {usd_text(spend.usd_limit)}" if spend.usd_limit is not None else "")),
    ]
    if state.objectives is not None:  # None: a task submitted before tasks carried them
        rows.append(("objectives", describe(state.objectives)))
    if state.stuck is not None:
        rows.append(
            (
                "stuck",
                Text(
                    f"{state.stuck.describe()}\nNothing of it runs until a worker can run its workflow code again"
                    ' (docs/operations.md, "Stuck tasks").',
                    style="red",
                ),
            )
        )
    if state.waiting_for:
        trouble = f" [{state.gpu_trouble}]" if state.gpu_trouble else ""
        rows.append(("waiting for", state.waiting_for + trouble))
    if state.question:
        rows.append(("question", state.question))
    if state.parent_task_id:
        rows.append(("parent", state.parent_task_id))
    if state.children:
        rows.append(("children", ", ".join(state.children)))
    if checkpoints is not None:
        rows.append(("checkpoints", str(checkpoints)))
    for event in events_of(InterruptionEvent, interruptions or []):
        cut = event.data
        rows.append(
            (
                "interrupted",
                f"step {cut.step} on {cut.node_id} ({cut.kind}):"
                f" {cut.tokens_kept} tokens kept, {cut.tokens_lost} tokens lost;"
                f" resumed on {cut.resumed_on}"
                f" after {cut.resume_s or 0:.1f}s",
            )
        )
    if ledger is not None:
        t = ledger.totals
        rows.append(
            (
                "ledger",
                f"{t.calls} calls, {t.prompt_tokens:,} prompt + {t.completion_tokens:,} completion"
                f" + {t.lost_tokens:,} lost + {t.kept_tokens:,} kept tokens, {usd_text(t.cost_usd)}",
            )
        )
    if state.error:
        rows.append(("error", Text(state.error, style="red")))
    if state.result is not None:
        rows.append(("result", state.result))
    for name, value in rows:
        table.add_row(name, value)
    return table


def agents_table(agents: list[AgentSpec]) -> Table:
    table = Table(box=None, header_style="bold")
    for column in ("AGENT", "VERSION", "MODEL", "TOOLS", "MAX STEPS"):
        table.add_column(column, no_wrap=True)
    for a in agents:
        table.add_row(a.name, a.version, a.model, ", ".join(t.name for t in a.tools) or "-", str(a.max_steps))
    return table


def agent_panel(agent: AgentSpec) -> Table:
    table = Table(box=None, show_header=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    table.add_row("agent", agent.name)
    table.add_row("version", agent.version)
    table.add_row("model", agent.model)
    table.add_row("max steps", str(agent.max_steps))
    table.add_row("max tokens/step", str(agent.max_tokens_per_step))
    table.add_row("spawns sub-agents", "yes" if agent.allow_spawn else "no")
    table.add_row("asks a human", "yes" if agent.allow_ask_human else "no")
    if agent.objectives is not None:
        table.add_row("objectives", f"{describe(agent.objectives)} (over its tenant's; a task's own win)")
    for tool in agent.tools:
        table.add_row("tool", f"{tool.name}: {tool.description}" if tool.description else tool.name)
    if agent.instructions:
        table.add_row("instructions", agent.instructions)
    return table


def checkpoints_table(checkpoints: list[CheckpointSummary]) -> Table:
    table = Table(box=None, header_style="bold")
    for column in ("SEQ", "STEP", "MESSAGES", "BYTES", "HASH", "CREATED"):
        table.add_column(column, no_wrap=True)
    for c in checkpoints:
        table.add_row(
            str(c.seq),
            str(c.step),
            str(c.message_count),
            f"{c.delta_bytes:,}",
            c.hash,
            c.created_at.strftime("%Y-%m-%d %H:%M:%S") if c.created_at else "",
        )
    return table


def event_line(event: TaskEvent) -> str:
    """Any event as its row holds it, a kind without a model too: every field it stored, bar the result."""
    details = " ".join(f"{k}={v}" for k, v in event.data.items() if v is not None and k != "result")
    return f"{event.seq:>6}  {event.at.strftime('%H:%M:%S')}  {event.kind:<10} {details}"


# -- live progress -----------------------------------------------------------------------


class TaskProgress:
    """Step, tokens used against the limit and status of one task, redrawn from its events.

    On a terminal it is one live line; elsewhere (a pipe, CI) it prints a line per change.
    """

    def __init__(self, state: TaskState, console: Console | None = None) -> None:
        self.console = console or stderr()
        self.task_id = state.task_id
        self.status = state.status.value
        self.step = state.step
        self.max_steps = state.max_steps
        self.tokens_used = state.spend.tokens_used
        self.token_limit = state.spend.token_limit
        self._live: Live | None = None
        self._last_line = ""

    def __enter__(self) -> TaskProgress:
        if self.console.is_terminal:
            self._live = Live(self._render(), console=self.console, refresh_per_second=8, transient=False)
            self._live.__enter__()
        else:
            self._print()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.update(self._render())
            self._live.__exit__(None, None, None)

    def update(self, event: TaskEvent) -> None:
        """Take the step, the spend and the status from the events that say them: a step's, a model call's,
        and every event the workflow writes with the task's state."""
        typed = parse_event(event)
        if isinstance(typed, StepRecordedEvent):
            self._take(None, typed.data.step, typed.data.tokens_used, typed.data.token_limit)
        elif isinstance(typed, ModelCallEvent):
            self._take(None, typed.data.step, None, None)
        elif isinstance(typed.data, TaskSnapshot):
            snapshot = typed.data
            self._take(snapshot.status, snapshot.step, snapshot.tokens_used, snapshot.token_limit)
        if self._live is not None:
            self._live.update(self._render())
        else:
            self._print()

    def _take(
        self, status: TaskStatus | None, step: int | None, tokens_used: int | None, token_limit: int | None
    ) -> None:
        """What an event said; what it left out (None) stays as it was."""
        if status is not None:
            self.status = status.value
        if step is not None:
            self.step = step
        if tokens_used is not None:
            self.tokens_used = tokens_used
        if token_limit:
            self.token_limit = token_limit

    def _line(self) -> str:
        return (
            f"{self.task_id}  step {self.step}/{self.max_steps}  "
            f"tokens {self.tokens_used:,}/{self.token_limit:,}  {self.status}"
        )

    def _print(self) -> None:
        line = self._line()
        if line != self._last_line:
            self._last_line = line
            print(line, file=self.console.file, flush=True)

    def _render(self) -> Table:
        table = Table.grid(padding=(0, 2))
        table.add_row(
            Text(self.task_id, style="bold"),
            f"step {self.step}/{self.max_steps}",
            ProgressBar(total=max(self.token_limit, 1), completed=min(self.tokens_used, self.token_limit), width=30),
            f"{self.tokens_used:,}/{self.token_limit:,} tokens",
            Text(self.status, style=_status_style(self.status)),
        )
        return table


def _status_style(value: str) -> str:
    """A task status's style; none for any other word (an event may name a status of its own)."""
    try:
        return _STATUS_STYLE.get(TaskStatus(value), "")
    except ValueError:
        return ""
