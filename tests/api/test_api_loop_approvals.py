"""An own loop's tool calls that wait for a person (an Agents SDK tool with `needs_approval`), on the real worker
and the simulated engine: the task waits awaiting_input naming the tool and its arguments, a person approves or
rejects it from the SDK, the CLI or MCP, and the run resumes from the state the task holds, in its own process
or in a re-run after that process died."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any
from unittest.mock import patch

import httpx
import pytest
from agents import Agent as SdkAgent
from agents import function_tool
from api_helpers import Stack, unique
from ui_helpers import csrf_of

from orchestrator.api.task_ids import scoped_task_id
from orchestrator.cli import tasks as cli_tasks
from orchestrator.mcp_server.server import build_server
from sdk import AgentSpec, Budget, Client, NotFound, TaskHandle, TaskState, TaskStatus
from sdk.openai_agents import run_on_berth
from sdk.wire.identity import Role

MODEL = "llama-3.2-1b"


def researcher(ran: list[str]) -> SdkAgent:
    @function_tool(needs_approval=True)
    def lookup(subject: str) -> str:
        """Look a subject up (it costs money: a person approves each lookup)."""
        ran.append(subject)
        return f"notes on {subject}"

    return SdkAgent(name="Researcher", instructions="Research each subject, then report.", tools=[lookup])


async def waiting_for_approval(task: TaskHandle, timeout: float = 60) -> TaskState:
    async with asyncio.timeout(timeout):
        while True:
            with contextlib.suppress(NotFound):  # not submitted yet
                state = await task.status()
                if state.approvals or state.status.is_final:
                    return state
            await asyncio.sleep(0.1)


async def started(stack: Stack, agent: SdkAgent, task_id: str, input: Any = "H100 bandwidth") -> tuple[Any, TaskHandle]:
    run = asyncio.create_task(
        run_on_berth(stack.client, agent, input, model=MODEL, budget=Budget(tokens=20_000), task_id=task_id)
    )
    task = stack.client.task(scoped_task_id("default", task_id))
    return run, task


async def test_a_tool_that_needs_approval_waits_for_a_person_and_runs_once_approved(stack: Stack) -> None:
    ran: list[str] = []
    run, task = await started(stack, researcher(ran), unique("approve"))

    state = await waiting_for_approval(task)
    assert state.status == TaskStatus.awaiting_input and ran == []
    (call,) = state.approvals
    assert call.tool == "lookup" and json.loads(call.arguments) == {"subject": "H100 bandwidth"}
    assert state.question is not None and "lookup" in state.question and "H100 bandwidth" in state.question
    # A plain answer is not a decision: the task says what it waits for.
    with pytest.raises(Exception, match="approved or rejected"):
        await task.answer("yes")

    await task.approve()
    result = await asyncio.wait_for(run, 120)

    assert ran == ["H100 bandwidth"]
    assert "notes on H100 bandwidth" in result.final_output
    final = await task.status()
    assert final.status == TaskStatus.completed and final.approvals == [] and final.question is None
    kinds = [e.kind for e in await _events(task)]
    assert kinds.count("approval_asked") == 1 and kinds.count("approval_decided") == 1
    asked = next(e for e in await _events(task) if e.kind == "approval_asked")
    assert asked.data["trace_id"].startswith("trace_")  # the run's Agents SDK trace, recorded on the task
    (traced,) = [e for e in await _events(task) if e.kind == "loop_trace"]
    assert traced.data == {"trace_id": asked.data["trace_id"], "workflow_name": "Agent workflow"}


async def test_a_rejected_call_does_not_run_and_the_model_is_told(stack: Stack) -> None:
    ran: list[str] = []
    run, task = await started(stack, researcher(ran), unique("reject"))
    await waiting_for_approval(task)

    await task.reject()
    result = await asyncio.wait_for(run, 120)

    assert ran == []
    assert "Tool execution was not approved." in result.final_output  # the Agents SDK's own words to the model
    assert (await task.status()).status == TaskStatus.completed


async def test_a_reason_given_with_a_reject_is_what_the_model_reads(stack: Stack) -> None:
    ran: list[str] = []
    run, task = await started(stack, researcher(ran), unique("reject"))
    await waiting_for_approval(task)

    await task.reject(reason="too expensive today")
    result = await asyncio.wait_for(run, 120)
    assert ran == [] and "too expensive today" in result.final_output


async def test_each_call_of_a_run_waits_for_its_own_decision(stack: Stack) -> None:
    ran: list[str] = []
    run, task = await started(stack, researcher(ran), unique("two"), input="H100 bandwidth; A100 bandwidth")
    first = await waiting_for_approval(task)
    assert json.loads(first.approvals[0].arguments) == {"subject": "H100 bandwidth"}
    await task.approve(first.approvals[0].call_id)

    async with asyncio.timeout(60):  # the run resumes, the tool runs, and the model asks for the next call
        while (second := await task.status()).approvals in ([], first.approvals):
            await asyncio.sleep(0.1)
    assert ran == ["H100 bandwidth"] and json.loads(second.approvals[0].arguments) == {"subject": "A100 bandwidth"}
    await task.reject(reason="one is enough")

    result = await asyncio.wait_for(run, 120)
    assert ran == ["H100 bandwidth"]
    assert "notes on H100 bandwidth" in result.final_output and "one is enough" in result.final_output


async def test_a_loop_killed_while_waiting_resumes_from_the_state_the_task_holds(stack: Stack) -> None:
    ran: list[str] = []
    task_id = unique("killed")
    run, task = await started(stack, researcher(ran), task_id)
    await waiting_for_approval(task)
    run.cancel()  # the process dies while it waits
    with pytest.raises(asyncio.CancelledError):
        await run

    # The person approves while no loop runs, from the CLI; the task waits for its loop again.
    approved = await _cli(cli_tasks.cmd_approve, stack.client, task_id=task.task_id, call_id=None)
    assert approved == 0
    assert (await task.status()).status == TaskStatus.running

    again = await run_on_berth(
        stack.client, researcher(ran), "H100 bandwidth", model=MODEL, budget=Budget(tokens=20_000), task_id=task_id
    )
    assert ran == ["H100 bandwidth"] and "notes on H100 bandwidth" in again.final_output
    ledger = await task.ledger()
    assert ledger.totals.calls == 2  # the call that asked for the tool, and the answer: none generated twice


async def test_a_rerun_while_the_call_still_waits_waits_for_it_and_an_mcp_reject_reaches_it(stack: Stack) -> None:
    ran: list[str] = []
    task_id = unique("mcp")
    run, task = await started(stack, researcher(ran), task_id)
    await waiting_for_approval(task)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run

    # Run again with another key: the state the task holds was signed with the first one, so the run starts over
    # (its calls replayed by the task) and stops at the same call, whose decision it then waits for.
    other = stack.as_key(stack.store.keys.create(Role.admin, name="second").key)
    again = asyncio.create_task(
        run_on_berth(
            other, researcher(ran), "H100 bandwidth", model=MODEL, budget=Budget(tokens=20_000), task_id=task_id
        )
    )
    await asyncio.sleep(1)
    assert not again.done() and (await task.status()).status == TaskStatus.awaiting_input

    mcp = build_server(_fixed(stack.client))
    await mcp.call_tool("reject_tool_call", {"task_id": task.task_id, "reason": "not now"})
    result = await asyncio.wait_for(again, 120)
    assert ran == [] and "not now" in result.final_output
    assert (await task.ledger()).totals.calls == 2  # the first call was replayed, not generated again
    await other.aclose()


async def test_the_task_page_shows_the_call_and_its_approve_button_resumes_the_run(stack: Stack) -> None:
    ran: list[str] = []
    run, task = await started(stack, researcher(ran), unique("ui"))
    await waiting_for_approval(task)
    key = stack.store.keys.create(Role.operator, name="ui").key
    async with httpx.AsyncClient(transport=httpx.ASGITransport(stack.app), base_url="http://berth") as browser:
        login = await browser.get("/login")
        await browser.post("/login", data={"api_key": key, "csrf_token": csrf_of(login)})
        page = await browser.get(f"/tasks/{task.task_id}")
        section = page.text[page.text.index('<section id="approval">') :]
        section = section[: section.index("</section>")]
        assert "<code>lookup</code>" in section and "H100 bandwidth" in section
        assert 'id="approve"' in section and 'id="reject"' in section
        done = await browser.post(f"/tasks/{task.task_id}/approve", data={"csrf_token": csrf_of(page)})
        assert done.status_code == 303, done.text[:500]
    result = await asyncio.wait_for(run, 120)
    assert ran == ["H100 bandwidth"] and "notes on H100 bandwidth" in result.final_output


async def test_an_approval_wait_does_not_count_as_the_loop_falling_silent(stack: Stack) -> None:
    """A task whose loop is silent for loop_idle_s fails, but not while it waits for a person: the silence
    counts again from the decision."""
    agent = AgentSpec(name=unique("idle"), model=MODEL, loop="own", loop_idle_s=1.5)
    await stack.client.register(agent)
    task = await stack.client.submit(agent.name, "H100 bandwidth", budget=Budget(tokens=20_000))
    http = httpx.AsyncClient(transport=httpx.ASGITransport(stack.app), base_url="http://berth", headers=_auth(stack))
    async with http:
        tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
        reply = await http.post(
            f"/v1/tasks/{task.task_id}/chat/completions",
            json={"model": MODEL, "messages": [{"role": "user", "content": "H100 bandwidth"}], "tools": [tool]},
        )
        assert reply.status_code == 200, reply.text
        (call,) = reply.json()["choices"][0]["message"]["tool_calls"]
        asked = await http.post(
            f"/v1/tasks/{task.task_id}/approvals",
            json={"calls": [{"call_id": call["id"], "tool": "lookup", "arguments": "{}"}], "run_state": "{}"},
        )
        assert asked.status_code == 200, asked.text
        unknown = await http.post(f"/v1/tasks/{task.task_id}/approve", json={"call_id": "call_nope"})
        assert unknown.status_code == 409 and unknown.json()["error"]["field"] == "call_id"

        await asyncio.sleep(3)  # twice the loop's idle time
        assert (await task.status()).status == TaskStatus.awaiting_input

        await task.approve(call["id"])
        held = await task.approvals()
        assert held is not None and held.decisions[call["id"]].approved and not held.waiting
        state = await task.status()
        assert state.status == TaskStatus.running
        async with asyncio.timeout(30):
            while not state.status.is_final:
                await asyncio.sleep(0.2)
                state = await task.status()
    assert state.status == TaskStatus.failed and "made no call" in (state.error or "")


async def test_input_items_are_taken_as_runner_run_takes_them(stack: Stack) -> None:
    @function_tool
    def lookup(subject: str) -> str:
        """Look a subject up."""
        return f"notes on {subject}"

    agent = SdkAgent(name="Researcher", instructions="Research each subject, then report.", tools=[lookup])
    items: list[Any] = [{"role": "user", "content": "H100 bandwidth; A100 bandwidth"}]
    run = await run_on_berth(
        stack.client, agent, items, model=MODEL, budget=Budget(tokens=20_000), task_id=unique("items")
    )
    assert "notes on A100 bandwidth" in run.final_output
    state = await run.task.status()
    assert state.status == TaskStatus.completed


async def _events(task: TaskHandle) -> list[Any]:
    state = await task.status()
    assert state.status.is_final
    return [e async for e in task.events()]


def _auth(stack: Stack) -> dict[str, str]:
    return {"Authorization": f"Bearer {stack.client._api_key}"}


def _fixed(client: Client) -> Callable[[], Any]:
    @asynccontextmanager
    async def opened() -> AsyncIterator[Client]:
        yield client

    return opened


async def _cli(command: Callable[[Any], int], client: Client, **args: Any) -> int:
    """A CLI command's body against the test's client (its `run_with_client` opens one from flags)."""
    ran: list[Awaitable[int]] = []

    def with_client(_: Any, body: Callable[[Client], Awaitable[int]]) -> int:
        ran.append(body(client))
        return 0

    with patch.object(cli_tasks, "run_with_client", with_client):
        command(type("Args", (), args)())
    return await ran[0]


async def test_a_decision_with_nothing_waiting_is_refused_naming_approvals(stack: Stack) -> None:
    spec = await stack.client.register(AgentSpec(name=unique("own"), model=MODEL, loop="own"))
    task = await stack.client.submit(spec.name, "H100 bandwidth", budget=20_000)
    nothing = await stack.client._http.post(f"/v1/tasks/{task.task_id}/approve", json={})
    assert nothing.status_code == 409 and nothing.json()["error"]["field"] == "approvals", nothing.text
    await task.cancel()
