"""`berth submit` and `berth tasks …`: submit, inspect and steer tasks through the API."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic import ValidationError

from sdk import Budget, Client, InvalidSpec, TaskEvent, TaskHandle, TaskState, TaskStatus, TextReset, TokenDelta
from sdk.wire.limits import MAX_PAGE, MAX_REASON_CHARS

from . import output
from .objective_flags import add_objective_flags, flag_of, objectives_of
from .output import EXIT_FAILED, EXIT_OK, add_api_flag, fail, run_with_client

EVENT_FIELDS = set(TaskEvent.model_fields)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("submit", help="submit a task to a registered agent")
    p.add_argument("agent", help="registered agent name")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", help="the task's input text")
    source.add_argument("--input-file", metavar="FILE", help="read the input from FILE ('-' for stdin)")
    p.add_argument("--budget", type=int, required=True, metavar="TOKENS", help="token limit, sub-agents included")
    p.add_argument("--usd", type=float, help="dollar limit")
    p.add_argument("--task-id", help="your own id (resubmitting the same id and spec is a no-op)")
    p.add_argument("--tenant", help="whose task it is (default: the key's own tenant, or default for a key of none)")
    p.add_argument("--priority", type=int, default=0, help="0 (default) to 9")
    p.add_argument("--model", help="use this model instead of the agent's")
    p.add_argument(
        "--service-class",
        choices=["interactive", "batch", "low_priority"],
        default="interactive",
        help="interactive prefers on-demand GPUs; batch and low_priority prefer spot;"
        " low_priority never starts a replica",
    )
    p.add_argument("--max-steps", type=int, help="override the agent's step limit")
    p.add_argument("--wait", action="store_true", help="follow the task live; exit 0 only if it completes")
    add_objective_flags(p, over="the agent's, the tenant's and the service class's")
    add_api_flag(p)
    p.set_defaults(func=cmd_submit)

    tasks = subparsers.add_parser("tasks", help="list, inspect and steer tasks")
    sub = tasks.add_subparsers(dest="tasks_command", required=True)

    p = sub.add_parser("list", help="tasks, newest first")
    p.add_argument("--status", help=f"one of: {', '.join(s.value for s in TaskStatus)}")
    p.add_argument("--agent")
    p.add_argument("--tenant")
    p.add_argument("--parent", help="only sub-agents of this task")
    p.add_argument("--limit", type=int, default=50, help=f"rows to show, 1 to {MAX_PAGE} (default 50)")
    p.add_argument("--offset", type=int, default=0, help="rows to skip first: the next page starts where one ended")
    add_api_flag(p)
    output.add_output_flag(p)
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("show", help="a task's state, spend, result, ledger and checkpoints")
    p.add_argument("task_id")
    add_api_flag(p)
    output.add_output_flag(p)
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("cancel", help="stop a task: a running generation is cut, its sub-agents are cancelled")
    p.add_argument("task_id")
    p.add_argument("--reason", default="cancelled from the CLI", help=f"why (at most {MAX_REASON_CHARS} characters)")
    add_api_flag(p)
    p.set_defaults(func=cmd_cancel)

    p = sub.add_parser("raise-budget", help="add tokens (and dollars) to a task's budget")
    p.add_argument("task_id")
    p.add_argument("tokens", type=int)
    p.add_argument("--usd", type=float, default=0.0)
    add_api_flag(p)
    p.set_defaults(func=cmd_raise_budget)

    p = sub.add_parser("answer", help="answer the question of a task awaiting input")
    p.add_argument("task_id")
    p.add_argument("text")
    add_api_flag(p)
    p.set_defaults(func=cmd_answer)

    p = sub.add_parser("approve", help="approve the tool calls an own loop's task waits on (its `approvals`)")
    p.add_argument("task_id")
    p.add_argument("--call-id", help="approve this call only (default: every waiting call)")
    add_api_flag(p)
    p.set_defaults(func=cmd_approve)

    p = sub.add_parser("reject", help="reject the tool calls an own loop's task waits on: the model is told")
    p.add_argument("task_id")
    p.add_argument("--reason", help="what the model is told instead of the tool's output")
    p.add_argument("--call-id", help="reject this call only (default: every waiting call)")
    add_api_flag(p)
    p.set_defaults(func=cmd_reject)

    p = sub.add_parser("fork", help="start a new task from one of a task's checkpoints")
    p.add_argument("task_id")
    p.add_argument("--checkpoint", type=int, required=True, metavar="SEQ")
    p.add_argument("--budget", type=int, metavar="TOKENS", help="token limit of the new task (default: the source's)")
    p.add_argument("--model")
    p.add_argument("--task-id", dest="new_task_id", metavar="ID", help="id of the new task")
    add_api_flag(p)
    p.set_defaults(func=cmd_fork)

    p = sub.add_parser("checkpoints", help="a task's checkpoints")
    p.add_argument("task_id")
    add_api_flag(p)
    output.add_output_flag(p)
    p.set_defaults(func=cmd_checkpoints)

    p = sub.add_parser("events", help="follow a task's events until it ends")
    p.add_argument("task_id")
    p.add_argument("--after", type=int, default=0, metavar="SEQ", help="start after this event")
    p.add_argument("--text", action="store_true", help="also print each answer as the model writes it")
    add_api_flag(p)
    p.set_defaults(func=cmd_events)


def cmd_submit(args: argparse.Namespace) -> int:
    if args.input_file is not None:
        try:
            text = sys.stdin.read() if args.input_file == "-" else Path(args.input_file).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            return fail(
                f"cannot read {args.input_file}: {exc.strerror if isinstance(exc, OSError) else exc}", "input-file"
            )
    else:
        text = args.input

    try:
        budget = Budget(tokens=args.budget, usd=args.usd)
    except InvalidSpec as refusal:
        return fail(refusal.message, refusal.field)
    try:
        objectives = objectives_of(args)
    except ValidationError as exc:
        refused = InvalidSpec.from_validation(exc)
        return fail(refused.message, flag_of(refused.field))

    async def command(client: Client) -> int:
        handle = await client.submit(
            args.agent,
            text,
            budget,
            task_id=args.task_id,
            tenant=args.tenant,
            priority=args.priority,
            model=args.model,
            max_steps=args.max_steps,
            service_class=args.service_class,
            objectives=objectives,
        )
        print(handle.task_id, flush=True)
        if not args.wait:
            return EXIT_OK
        return await follow_to_end(handle)

    return run_with_client(args, command)


async def follow_to_end(handle: TaskHandle) -> int:
    """Show live progress until the task is final; print its result; 0 only if it completed."""
    state = await handle.status()
    after = 0
    with output.TaskProgress(state) as progress:
        while not state.status.is_final:
            async for event in handle.events(after=after):
                after = event.seq
                progress.update(event)
            state = await handle.status()
    return print_outcome(state)


def print_outcome(state: TaskState) -> int:
    if state.status == TaskStatus.completed:
        print(state.result or "")
        return EXIT_OK
    reason = f": {state.error}" if state.error else ""
    print(f"task {state.task_id} ended {state.status.value}{reason}", file=sys.stderr)
    if state.result:
        print(state.result)
    return EXIT_FAILED


def cmd_list(args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= MAX_PAGE:
        return fail(f"must be between 1 and {MAX_PAGE}, got {args.limit}", "limit")
    if args.offset < 0:
        return fail(f"must be 0 or more, got {args.offset}", "offset")

    async def command(client: Client) -> int:
        # One row past the page says whether more match, so a cut list never passes for the whole one.
        states = await client.tasks(
            args.status,
            args.agent,
            min(args.limit + 1, MAX_PAGE),
            tenant=args.tenant,
            parent=args.parent,
            offset=args.offset,
        )
        more = len(states) > args.limit or len(states) == args.limit == MAX_PAGE
        states = states[: args.limit]
        output.emit(
            args, states, lambda: print("no tasks") if not states else output.stdout().print(output.tasks_table(states))
        )
        if more:
            print(
                f"showing tasks {args.offset + 1}-{args.offset + len(states)}, newest first; more match:"
                f" --offset {args.offset + len(states)} for the next page",
                file=sys.stderr,
            )
        return EXIT_OK

    return run_with_client(args, command)


def cmd_show(args: argparse.Namespace) -> int:
    async def command(client: Client) -> int:
        handle = client.task(args.task_id)
        state = await handle.status()
        ledger = await handle.ledger()
        checkpoints = await handle.checkpoints()
        interruptions = await handle.interruptions() if state.interruptions else []
        whole = {"state": state, "ledger": ledger, "checkpoints": checkpoints, "interruptions": interruptions}
        return output.emit(
            args,
            whole,
            lambda: output.stdout().print(output.task_panel(state, ledger, len(checkpoints), interruptions)),
        )

    return run_with_client(args, command)


def cmd_cancel(args: argparse.Namespace) -> int:
    if not 1 <= len(args.reason) <= MAX_REASON_CHARS:  # the API's and MCP's bound, refused before sending
        return fail(f"a reason of 1 to {MAX_REASON_CHARS} characters is required, got {len(args.reason):,}", "reason")

    async def command(client: Client) -> int:
        state = await client.task(args.task_id).cancel(args.reason)
        print(f"cancel requested for {state.task_id} (status {state.status.value})")
        return EXIT_OK

    return run_with_client(args, command)


def cmd_raise_budget(args: argparse.Namespace) -> int:
    async def command(client: Client) -> int:
        spend = await client.task(args.task_id).raise_budget(args.tokens, args.usd)
        usd = f", usd limit {spend.usd_limit:.2f}" if spend.usd_limit is not None else ""
        print(f"{args.task_id}: token limit {spend.token_limit:,} (used {spend.tokens_used:,}){usd}")
        return EXIT_OK

    return run_with_client(args, command)


def cmd_approve(args: argparse.Namespace) -> int:
    async def command(client: Client) -> int:
        state = await client.task(args.task_id).approve(args.call_id)
        print(f"approved {args.call_id or 'every waiting call'} of {state.task_id} (status {state.status.value})")
        return EXIT_OK

    return run_with_client(args, command)


def cmd_reject(args: argparse.Namespace) -> int:
    async def command(client: Client) -> int:
        state = await client.task(args.task_id).reject(args.reason, args.call_id)
        print(f"rejected {args.call_id or 'every waiting call'} of {state.task_id} (status {state.status.value})")
        return EXIT_OK

    return run_with_client(args, command)


def cmd_answer(args: argparse.Namespace) -> int:
    async def command(client: Client) -> int:
        state = await client.task(args.task_id).answer(args.text)
        print(f"answered {state.task_id} (status {state.status.value})")
        return EXIT_OK

    return run_with_client(args, command)


def cmd_fork(args: argparse.Namespace) -> int:
    async def command(client: Client) -> int:
        forked = await client.task(args.task_id).fork(
            args.checkpoint, budget=args.budget, model=args.model, task_id=args.new_task_id
        )
        print(forked.task_id)
        return EXIT_OK

    return run_with_client(args, command)


def cmd_checkpoints(args: argparse.Namespace) -> int:
    async def command(client: Client) -> int:
        checkpoints = await client.task(args.task_id).checkpoints()
        return output.emit(
            args,
            checkpoints,
            lambda: (
                print("no checkpoints")
                if not checkpoints
                else output.stdout().print(output.checkpoints_table(checkpoints))
            ),
        )

    return run_with_client(args, command)


def cmd_events(args: argparse.Namespace) -> int:
    async def command(client: Client) -> int:
        handle = client.task(args.task_id)
        if not args.text:
            async for event in handle.events(after=args.after):
                print(output.event_line(event), flush=True)
            return EXIT_OK
        writing = False  # an answer's text is being printed: the next event line starts on a line of its own
        async for typed in handle.stream(after=args.after):
            if isinstance(typed, TokenDelta):
                sys.stdout.write(typed.text)
                sys.stdout.flush()
                writing = True
                continue
            if isinstance(typed, TextReset):  # printed text cannot be taken back: say where the answer starts over
                print(f"\n[step {typed.step}: its text from character {typed.offset} on is replaced by what follows]")
                continue
            if writing:
                print()
                writing = False
            print(output.event_line(TaskEvent.model_validate(typed.model_dump(include=EVENT_FIELDS))), flush=True)
        return EXIT_OK

    return run_with_client(args, command)
