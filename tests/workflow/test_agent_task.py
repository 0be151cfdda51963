"""AgentTaskWorkflow end to end: steps, tools, budget, humans, sub-agents, cancel, fork."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import UTC, datetime

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError

from sdk import Agent, Budget, LatencyObjectives, Spend, TaskSpec, TaskState, TaskStatus, tool
from sdk.wire.contracts import CancelRequest, HumanAnswer, RaiseBudget
from sdk.wire.task_run import CURRENT_WORKFLOW_VERSION, TaskRun
from workflows.agent_task import MAX_TOOL_CALLS_PER_STEP


async def wait_status(handle, status: TaskStatus, timeout_s: float = 30) -> TaskState:
    for _ in range(int(timeout_s * 10)):
        state = await handle.query("state", result_type=TaskState)
        if state.status == status:
            return state
        await asyncio.sleep(0.1)
    raise AssertionError(f"task never reached {status}; last: {state.status} {state.error}")


async def test_research_task_runs_tools_then_answers(berth) -> None:
    agent = berth.research_agent()
    handle = await berth.start(agent, "H100 bandwidth; A100 bandwidth", 20_000)
    state: TaskState = await handle.result()

    assert state.status == TaskStatus.completed, state.error
    assert state.step == 5  # 2 subjects × 2 tools, then the answer
    assert "H100" in state.result
    assert sorted(name for name, _ in berth.tool_calls) == ["search", "search", "take_note", "take_note"]
    assert berth.duplicate_tool_calls() == []
    totals = berth.store.ledger.totals(state.task_id)
    engine = await berth.engine_usage(state.task_id)
    assert totals.calls == 5 == engine["requests"]
    assert totals.prompt_tokens == engine["prompt_tokens"]
    assert totals.completion_tokens == engine["completion_tokens"]
    assert state.spend.tokens_used == totals.prompt_tokens + totals.completion_tokens <= 20_000
    checkpoints = berth.store.checkpoints.list(state.task_id)
    assert [c.seq for c in checkpoints] == list(range(6))
    whole = berth.store.checkpoints.read(checkpoints[-1].id)
    assert [m.role for m in whole.messages][:3] == ["system", "user", "assistant"]
    assert whole.messages[-1].content == state.result
    stored = berth.store.tasks.get(state.task_id)
    assert stored.state.status == TaskStatus.completed


async def test_small_budget_waits_then_resumes_when_raised(berth) -> None:
    agent = berth.research_agent(max_tokens_per_step=300)
    handle = await berth.start(agent, "H100 bandwidth; A100 bandwidth; L4 bandwidth", 1_000)
    waiting = await wait_status(handle, TaskStatus.awaiting_budget)
    assert waiting.spend.tokens_used <= 1_000
    assert "more tokens" in waiting.waiting_for
    assert berth.store.tasks.get(waiting.task_id).state.status == TaskStatus.awaiting_budget

    spend = await handle.execute_update("raise_budget", RaiseBudget(tokens=20_000), result_type=Spend)
    assert spend.token_limit == 21_000
    state = await handle.result()
    assert state.status == TaskStatus.completed, state.error
    assert state.spend.tokens_used <= 21_000


async def test_budget_grace_ends_out_of_budget_with_partial_result(berth) -> None:
    agent = berth.research_agent(max_tokens_per_step=300)
    handle = await berth.start(agent, "H100 bandwidth; A100 bandwidth; L4 bandwidth", 900, grace_s=1)
    state = await handle.result()
    assert state.status == TaskStatus.out_of_budget
    assert 0 < state.spend.tokens_used <= 900
    assert state.step >= 1
    totals = berth.store.ledger.totals(state.task_id)
    assert totals.prompt_tokens + totals.completion_tokens == state.spend.tokens_used


async def test_raise_budget_is_refused_with_a_reason(berth) -> None:
    handle = await berth.start(berth.research_agent(), "H100 bandwidth", 20_000)
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update("raise_budget", RaiseBudget(tokens=0))
    assert "tokens" in str(refused.value.cause)
    await handle.result()


async def test_tool_failure_and_bad_arguments_are_reported_to_the_model(berth) -> None:
    from sdk import tool

    @tool(max_attempts=2)
    def flaky(topic: str) -> str:
        """Always fails."""
        raise RuntimeError("backend down")

    @tool
    def count(n: int) -> str:
        """Needs an integer; the engine passes the subject's length, a valid int."""
        return str(n)

    agent = Agent(berth.unique("flaky"), "llama-3.1-8b", "", [flaky, count])
    state = await (await berth.start(agent, "GPU prices", 20_000)).result()
    assert state.status == TaskStatus.completed, state.error
    whole = berth.store.checkpoints.read(berth.store.checkpoints.latest(state.task_id).id)
    tool_results = [m.content for m in whole.messages if m.role == "tool"]
    assert tool_results[0].startswith("tool error: flaky failed after 2 attempt(s)")
    assert "backend down" in tool_results[0]
    assert tool_results[1] == "10"


async def test_ask_human_waits_for_an_answer(berth) -> None:
    agent = berth.research_agent(allow_ask_human=True)
    handle = await berth.start(agent, "ask: which GPU do we own?\nH100 bandwidth", 20_000)
    waiting = await wait_status(handle, TaskStatus.awaiting_input)
    assert waiting.question == "which GPU do we own?"
    await handle.execute_update("answer", HumanAnswer(text="We own eight H100s"))
    state = await handle.result()
    assert state.status == TaskStatus.completed
    whole = berth.store.checkpoints.read(berth.store.checkpoints.latest(state.task_id).id)
    assert any(m.role == "tool" and m.content == "We own eight H100s" for m in whole.messages)


async def test_answer_is_refused_when_not_waiting(berth) -> None:
    handle = await berth.start(berth.research_agent(max_steps=50), "H100 bandwidth", 20_000)
    await handle.result()
    with pytest.raises(RPCError, match="already completed"):
        await handle.execute_update("answer", HumanAnswer(text="hi"))


async def test_cancel_while_waiting_for_input(berth) -> None:
    agent = berth.research_agent(allow_ask_human=True)
    handle = await berth.start(agent, "ask: proceed?", 20_000)
    await wait_status(handle, TaskStatus.awaiting_input)
    await handle.signal("cancel", CancelRequest(reason="operator said stop"))
    state = await handle.result()
    assert state.status == TaskStatus.cancelled
    assert state.error == "operator said stop"


async def test_coordinator_spawns_children_within_its_budget(berth) -> None:
    research = berth.research_agent()
    await berth.serve(research)
    coordinator = Agent(berth.unique("coordinator"), "llama-3.1-8b", "Delegate.", allow_spawn=True)
    text = (
        f"Plan GPU serving\ndelegate to {research.name}: H100 bandwidth (budget 5000)\n"
        f"delegate to {research.name}: A100 bandwidth (budget 5000)"
    )
    objectives = LatencyObjectives(ttft_s=0.8, attainment=0.9)
    state = await (await berth.start(coordinator, text, 30_000, objectives=objectives)).result()

    assert state.status == TaskStatus.completed, state.error
    assert len(state.children) == 2
    children = [berth.store.tasks.get(c).state for c in state.children]
    assert all(c.status == TaskStatus.completed for c in children)
    assert [c.objectives for c in children] == [objectives, objectives]  # working for whoever waits on the parent
    assert all(c.spend.token_limit == 5000 and c.spend.tokens_used <= 5000 for c in children)
    assert all(c.parent_task_id == state.task_id for c in children)
    own = berth.store.ledger.totals(state.task_id)
    child_used = sum(c.spend.tokens_used for c in children)
    assert state.spend.tokens_used == own.prompt_tokens + own.completion_tokens + child_used <= 30_000
    assert state.spend.reserved_for_children == 0


async def test_child_out_of_budget_returns_partial_result_to_parent(berth) -> None:
    research = berth.research_agent(max_tokens_per_step=300)
    await berth.serve(research)
    coordinator = Agent(berth.unique("coordinator"), "llama-3.1-8b", "", allow_spawn=True)
    text = f"Plan\ndelegate to {research.name}: H100 bandwidth; A100 bandwidth; L4 bandwidth (budget 700)"
    state = await (await berth.start(coordinator, text, 20_000)).result()
    assert state.status == TaskStatus.completed, state.error
    child = berth.store.tasks.get(state.children[0]).state
    assert child.status == TaskStatus.out_of_budget
    assert child.spend.tokens_used <= 700


async def test_long_task_continues_as_new_without_redoing_steps(berth) -> None:
    agent = berth.research_agent(max_steps=200)
    subjects = "; ".join(f"topic {i}" for i in range(20))
    handle = await berth.start(agent, subjects, 200_000)
    state = await handle.result()
    assert state.status == TaskStatus.completed, state.error
    assert state.step == 41
    assert berth.duplicate_tool_calls() == []
    assert len(berth.tool_calls) == 40
    totals = berth.store.ledger.totals(state.task_id)
    assert totals.calls == 41
    assert state.spend.tokens_used == totals.prompt_tokens + totals.completion_tokens
    runs = [wf async for wf in berth.client.list_workflows(f"WorkflowId = '{state.task_id}'")]
    assert len(runs) > 1, "expected the task to continue-as-new at least once"


async def test_max_steps_stops_the_task(berth) -> None:
    agent = berth.research_agent(max_steps=3)
    state = await (await berth.start(agent, "a; b; c; d", 50_000)).result()
    assert state.status == TaskStatus.max_steps
    assert state.step == 3


async def test_fork_from_a_checkpoint_reruns_from_there(berth) -> None:
    from sdk import ForkSource

    agent = berth.research_agent()
    source = await (await berth.start(agent, "H100 bandwidth; A100 bandwidth", 20_000)).result()
    fork = await berth.start(
        agent, "H100 bandwidth; A100 bandwidth", 20_000, fork_of=ForkSource(task_id=source.task_id, checkpoint_seq=2)
    )
    state = await fork.result()
    assert state.status == TaskStatus.completed
    assert state.step == 5  # steps 1–2 came from the source; 3–5 ran in the fork
    assert berth.store.ledger.totals(state.task_id).calls == 3
    forked = berth.store.checkpoints.read(berth.store.checkpoints.latest(state.task_id).id)
    original = berth.store.checkpoints.read(berth.store.checkpoints.latest(source.task_id).id)
    assert [m.content for m in forked.messages] == [m.content for m in original.messages]


async def test_a_client_can_spawn_a_sub_agent_paid_from_the_task(berth) -> None:
    from sdk.wire.builtins import SpawnAgentArgs
    from sdk.wire.contracts import SpawnedChild

    research = berth.research_agent()
    await berth.serve(research)
    parent_agent = berth.research_agent("lead", allow_ask_human=True)
    handle = await berth.start(parent_agent, "ask: go on?", 20_000)
    await wait_status(handle, TaskStatus.awaiting_input)

    spawned = await handle.execute_update(
        "spawn", SpawnAgentArgs(agent=research.name, input="H100 bandwidth", tokens=6_000), result_type=SpawnedChild
    )
    assert spawned.tokens == 6_000
    with pytest.raises(WorkflowUpdateFailedError):
        await handle.execute_update("spawn", SpawnAgentArgs(agent="nobody-here", input="x"))
    await handle.execute_update("answer", HumanAnswer(text="yes"))
    state = await handle.result()

    assert state.status == TaskStatus.completed, state.error
    child = berth.store.tasks.get(spawned.task_id).state
    assert child.status == TaskStatus.completed and child.parent_task_id == state.task_id
    own = berth.store.ledger.totals(state.task_id)
    assert state.spend.tokens_used == own.prompt_tokens + own.completion_tokens + child.spend.tokens_used
    assert state.spend.reserved_for_children == 0 and state.children == [spawned.task_id]


async def test_a_dollar_limit_is_enforced_and_can_be_raised(berth) -> None:
    agent = berth.research_agent(max_tokens_per_step=300)
    # llama-3.1-8b costs $0.20 / $0.30 per 1M tokens: $0.0001 pays for a few hundred tokens.
    handle = await berth.start(agent, "H100 bandwidth; A100 bandwidth; L4 bandwidth", 100_000, usd=0.0001)
    waiting = await wait_status(handle, TaskStatus.awaiting_budget)
    assert waiting.waiting_for.startswith("budget: $")
    assert waiting.spend.usd_used <= 0.0001
    await handle.execute_update("raise_budget", RaiseBudget(usd=0.01), result_type=Spend)
    state = await handle.result()
    assert state.status == TaskStatus.completed, state.error
    assert state.spend.usd_used <= 0.0101
    assert abs(berth.store.ledger.totals(state.task_id).cost_usd - state.spend.usd_used) < 1e-9


async def test_the_deadline_ends_a_task_that_is_waiting(berth) -> None:
    from datetime import datetime, timedelta

    from sdk import Budget, TaskSpec
    from sdk.wire.task_run import CURRENT_WORKFLOW_VERSION, TaskRun

    agent = berth.research_agent(allow_ask_human=True)
    await berth.serve(agent)
    task_id = berth.unique("t")
    spec = TaskSpec(
        task_id=task_id,
        agent=agent.name,
        input="ask: anyone there?",
        budget=Budget(20_000, deadline=timedelta(seconds=3)),
    )
    run = TaskRun(
        task_id=task_id,
        spec=spec,
        agent=berth.store.agents.get(agent.name),
        submitted_at=datetime.now(UTC),
        workflow_version=CURRENT_WORKFLOW_VERSION,
    )
    state = await berth.client.execute_workflow(
        "AgentTaskWorkflow", run, id=task_id, task_queue=berth.queue, result_type=TaskState
    )
    assert state.status == TaskStatus.out_of_budget
    assert state.error == "deadline passed"


async def test_a_reply_asking_for_more_tool_calls_than_a_step_runs_gets_errors_for_the_rest(berth) -> None:
    """A model (or a node that lies) asking for thousands of calls at once must not fill the task's history."""
    ran: list[str] = []

    def probe(i: int):
        def look(topic: str) -> str:
            ran.append(f"t{i}")
            return f"t{i} on {topic}"

        return tool(look, name=f"t{i}", description=f"Probe {i}.")

    wanted = MAX_TOOL_CALLS_PER_STEP + 6
    agent = Agent(
        berth.unique("wide"), "llama-3.1-8b", "Use every probe.", [probe(i) for i in range(wanted)], max_steps=1
    )
    handle = await berth.start(agent, "parallel\nthe H100", 200_000)  # one subject: every tool at once
    state = await handle.result()
    assert state.status == TaskStatus.max_steps, state.error
    record = berth.store.checkpoints.latest(state.task_id)
    assert record is not None
    answers = [m.content or "" for m in berth.store.checkpoints.read(record.id).messages if m.role == "tool"]
    refused = [a for a in answers if a.startswith(f"tool error: at most {MAX_TOOL_CALLS_PER_STEP} tool calls")]
    assert len(answers) == wanted and len(refused) == 6
    assert sorted(ran) == sorted(f"t{i}" for i in range(MAX_TOOL_CALLS_PER_STEP))


async def test_a_tool_call_no_worker_serves_says_so_until_a_worker_comes(berth) -> None:
    """The author forgot serve(): the task's state and events name the queue it waits on, and once a worker
    polls it the call runs, the wait is cleared and the task completes."""
    agent = berth.research_agent()
    berth.store.agents.register(agent.spec())  # registered, but no worker polls agent/<name>
    task_id = berth.unique("t")
    spec = TaskSpec(task_id=task_id, agent=agent.name, input="H100 bandwidth", budget=Budget(20_000))
    run = TaskRun(
        task_id=task_id,
        spec=spec,
        agent=berth.store.agents.get(agent.name),
        submitted_at=datetime.now(UTC),
        workflow_version=CURRENT_WORKFLOW_VERSION,
    )
    handle = await berth.client.start_workflow(
        "AgentTaskWorkflow", run, id=task_id, task_queue=berth.queue, result_type=TaskState
    )
    deadline = asyncio.get_running_loop().time() + 120
    while True:
        record = berth.store.tasks.get(task_id)
        if record is not None and (record.state.waiting_for or "").startswith("a tool worker on "):
            break
        assert asyncio.get_running_loop().time() < deadline, record and record.state
        await asyncio.sleep(0.2)
    assert record.state.status == TaskStatus.running
    assert f"a tool worker on agent/{agent.name}" in record.state.waiting_for
    told = berth.store.events.of_kind(task_id, "waiting_for_tool_worker")
    assert [e.data["task_queue"] for e in told] == [f"agent/{agent.name}"]

    await berth.serve(agent)
    state: TaskState = await handle.result()
    assert state.status == TaskStatus.completed and state.waiting_for is None
    assert sorted(name for name, _ in berth.tool_calls) == ["search", "take_note"]


async def test_berth_replay_judges_a_live_task_on_this_build(berth) -> None:
    """What an operator runs before an upgrade: the task's history, read from Temporal, replays."""
    agent = berth.research_agent()
    handle = await berth.start(agent, "H100 bandwidth", 20_000)
    await handle.result()
    port = berth.client.service_client.config.target_host.rsplit(":", 1)[1]
    judged = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "orchestrator.cli.main", "replay", "--temporal-port", port, "--json"]
        + ["--query", f'WorkflowId = "{handle.id}"'],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert judged.returncode == 0, judged.stdout + judged.stderr
    report = json.loads(judged.stdout)
    assert (report["replayed"], report["failing"]) == (1, 0)
    assert report["histories"][0]["workflow_id"] == handle.id
