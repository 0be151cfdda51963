"""The API with the real worker behind it: submit through the SDK, the workflow runs on the
simulated engine, and the live paths (state query, budget update, answer refusal) answer."""

from __future__ import annotations

import asyncio

import pytest
from api_helpers import Stack, unique
from pydantic import BaseModel, Field

from sdk import Agent, Budget, Conflict, InvalidSpec, ModelSettings, NotFound, TaskFailed, TaskStatus, Unauthorized


async def test_a_submitted_task_runs_to_its_result(stack: Stack) -> None:
    agent = Agent(unique("e2e"), "llama-3.2-1b", "Answer in one sentence.")
    await stack.client.register(agent)

    task = await stack.client.submit(agent, "What is a berth?", budget=Budget(tokens=20_000))
    result = await task.result(timeout=120)

    state = await task.status()
    assert state.status == TaskStatus.completed and state.result == result
    assert 0 < state.spend.tokens_used <= 20_000
    ledger = await task.ledger()
    assert ledger.totals.calls >= 1
    assert (
        ledger.totals.prompt_tokens + ledger.totals.completion_tokens + ledger.totals.lost_tokens
        == state.spend.tokens_used
    )
    assert len(await task.checkpoints()) >= 1
    kinds = [e.kind async for e in task.events()]
    assert "step" in kinds

    with pytest.raises(Conflict, match="already ended"):
        await task.raise_budget(1000)


async def test_a_task_short_of_budget_waits_and_resumes_when_raised(stack: Stack) -> None:
    agent = Agent(unique("e2e"), "llama-3.2-1b", "Answer in one sentence.", max_tokens_per_step=256)
    await stack.client.register(agent)
    # Too small for even one call: the task parks in awaiting_budget, visible live.
    task = await stack.client.submit(agent, "What is a berth?", budget=Budget(tokens=40), budget_grace_s=600)

    # (In-process, httpx's ASGI transport hands over a response only once it is complete,
    # so a live event stream cannot be followed here; ask for the state instead.)
    for _ in range(600):
        if (await task.status()).status == TaskStatus.awaiting_budget:
            break
        await asyncio.sleep(0.1)
    assert (await task.status()).status == TaskStatus.awaiting_budget

    with pytest.raises(Conflict, match="not awaiting_input"):
        await task.answer("this is not a question")
    spend = await task.raise_budget(20_000)

    assert spend.token_limit == 20_040
    assert await task.result(timeout=120)
    assert (await task.status()).spend.tokens_used <= 20_040


async def test_the_sdk_spawns_a_sub_agent_on_a_running_task(stack: Stack) -> None:
    from sdk import InvalidSpec

    helper = Agent(unique("helper"), "llama-3.2-1b", "Answer briefly.")
    lead = Agent(unique("lead"), "llama-3.2-1b", "Ask first.", allow_ask_human=True)
    await stack.client.register(helper)
    await stack.client.register(lead)
    task = await stack.client.submit(lead, "ask: shall I start?", budget=Budget(tokens=20_000))
    for _ in range(200):
        if (await task.status()).status == TaskStatus.awaiting_input:
            break
        await asyncio.sleep(0.1)

    child = await task.spawn(helper.name, "Summarise GPU pricing", tokens=5_000)
    with pytest.raises(InvalidSpec) as refused:
        await task.spawn("nobody-registered", "x")
    assert refused.value.field == "agent"
    await task.answer("yes")
    await task.result(timeout=120)
    await child.result(timeout=120)

    parent, sub = await task.status(), await child.status()
    assert sub.parent_task_id == task.task_id and sub.spend.token_limit == 5_000
    assert parent.children == [child.task_id]
    assert parent.spend.tokens_used <= 20_000 and parent.spend.reserved_for_children == 0


async def test_a_task_token_starts_sub_agents_paid_from_its_task_and_never_more(stack: Stack) -> None:
    """Budget delegation: what a task's token submits is the task's child, carved from what remains."""
    helper = Agent(unique("helper"), "llama-3.2-1b", "Answer briefly.")
    lead = Agent(unique("lead"), "llama-3.2-1b", "Ask first.", allow_ask_human=True)
    await stack.client.register(helper)
    await stack.client.register(lead)
    task = await stack.client.submit(lead, "ask: shall I start?", budget=Budget(tokens=20_000))
    outsider = await stack.client.submit(helper, "Unrelated work", budget=Budget(tokens=5_000))
    for _ in range(200):
        if (await task.status()).status == TaskStatus.awaiting_input:
            break
        await asyncio.sleep(0.1)
    used_so_far = (await task.status()).spend.tokens_used

    async with stack.as_key(await task.token()) as as_task:
        with pytest.raises(Conflict) as too_much:
            await as_task.submit(helper, "Everything at once", budget=Budget(tokens=50_000))
        assert too_much.value.field == "budget.tokens"
        assert f"asked for 50000 tokens, but only {20_000 - used_so_far} remain" in too_much.value.message
        child = await as_task.submit(helper, "Summarise GPU pricing", budget=Budget(tokens=5_000))
        state = await child.status()
        assert state.parent_task_id == task.task_id and state.spend.token_limit == 5_000
        assert {t.task_id for t in await as_task.tasks()} == {task.task_id, child.task_id}
        with pytest.raises(NotFound):
            await as_task.task(outsider.task_id).status()
        with pytest.raises(Unauthorized, match="it may submit sub-agents out of that task's budget") as escape:
            await as_task.task(task.task_id).raise_budget(100_000)
        assert escape.value.status_code == 403
        await child.result(timeout=120)
        sub = await child.status()
        for _ in range(100):  # the parent settles its child in the background
            parent = await task.status()
            if parent.spend.reserved_for_children == 0:
                break
            await asyncio.sleep(0.1)
        # The child's unused tokens came back: only what it used is charged to the parent.
        assert parent.spend.reserved_for_children == 0
        assert parent.spend.tokens_used == used_so_far + sub.spend.tokens_used <= 20_000
        await task.answer("yes")
        await task.result(timeout=120)
        with pytest.raises(Unauthorized, match="has ended"):
            await as_task.tasks()


async def test_a_task_token_refuses_what_a_sub_agent_takes_from_its_parent(stack: Stack) -> None:
    lead = Agent(unique("lead"), "llama-3.2-1b", "Ask first.", allow_ask_human=True)
    await stack.client.register(lead)
    task = await stack.client.submit(lead, "ask: shall I start?", budget=Budget(tokens=20_000))
    async with stack.as_key(await task.token()) as as_task:
        for field, kwargs in (
            ("model", {"model": "llama-3.1-8b"}),
            ("task_id", {"task_id": "mine-1"}),
            ("tenant", {"tenant": "acme"}),
        ):
            with pytest.raises(InvalidSpec) as refused:
                await as_task.submit(lead, "x", budget=Budget(tokens=1_000), **kwargs)
            assert refused.value.field == field
        with pytest.raises(Unauthorized, match="read its own tree and drive its own task.s own loop, nothing else"):
            await as_task.task(task.task_id).fork(0)
    await task.cancel()


async def test_model_settings_reach_the_engine_and_a_task_overrides_its_agents(stack: Stack) -> None:
    """The agent's stop string ends its answer where the engine met it; a task's own stop wins over it."""
    agent = Agent(
        unique("e2e"), "llama-3.2-1b", "Report.", settings=ModelSettings(temperature=0.2, stop=["\nApproach:"])
    )
    await stack.client.register(agent)

    plain = await (await stack.client.submit(agent, "What is a berth?", budget=Budget(tokens=20_000))).result(120)
    assert plain.startswith("Report on What is a berth?.\nNotes on") and "Approach:" not in plain
    overridden = await stack.client.submit(
        agent, "What is a berth?", budget=Budget(tokens=20_000), settings=ModelSettings(stop=["\nNotes"])
    )
    assert await overridden.result(120) == "Report on What is a berth?."
    run = stack.store.tasks.get((await overridden.status()).task_id)
    assert run is not None and '"stop":["\\nNotes"]' in run.spec_json.replace(" ", "")


async def test_a_setting_the_models_provider_cannot_apply_is_refused_naming_it(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-never-sent")
    agent = Agent(unique("e2e"), "llama-3.2-1b", "Report.")
    await stack.client.register(agent)
    with pytest.raises(InvalidSpec) as refused:
        await stack.client.submit(
            agent,
            "hello",
            budget=Budget(tokens=5_000),
            model="anthropic/claude-3-5-haiku-latest",
            settings=ModelSettings(temperature=0.1, seed=7),
        )
    assert refused.value.field == "settings.seed"
    assert "does not apply seed (asked by this task)" in refused.value.message
    assert await stack.client.tasks(agent=agent.name) == []  # nothing was started


class Verdict(BaseModel):
    summary: str = Field(max_length=40)
    confidence: int = Field(ge=1, le=5)
    sources: list[str]


async def test_an_output_type_comes_back_typed_from_an_engine_that_takes_its_schema(stack: Stack) -> None:
    agent = Agent(unique("typed"), "llama-3.2-1b", "Judge.", output_type=Verdict)
    await stack.client.register(agent)
    task = await stack.client.submit(agent, "Is a berth a dock?", budget=Budget(tokens=20_000))

    verdict = await task.result(timeout=120)
    assert isinstance(verdict, Verdict) and verdict.confidence == 1 and len(verdict.sources) == 1
    assert verdict.summary == "Report on Is a berth a dock?."  # the simulated model fills the schema from its prose
    state = await task.status()
    assert state.step == 1 and Verdict.model_validate_json(state.result) == verdict  # asked once: no repair
    assert await stack.client.task(state.task_id).result() == state.result  # without the type: the JSON text


async def test_an_answer_not_matching_its_output_type_gets_a_repair_step_on_a_route_without_schemas(
    stack: Stack,
) -> None:
    entry = stack.store.models.get("llama-3.2-1b").entry
    stack.store.models.put(entry.model_copy(update={"engine": "openai-compatible"}))  # no response format there
    agent = Agent(unique("typed"), "llama-3.2-1b", "Judge.", output_type=Verdict)
    await stack.client.register(agent)
    task = await stack.client.submit(agent, "Is a berth a dock?", budget=Budget(tokens=20_000))

    verdict = await task.result(timeout=120)
    assert isinstance(verdict, Verdict)
    state = await task.status()
    assert state.step == 2 and (await task.ledger()).totals.calls == 2  # the prose answer, then its repair
    latest = stack.store.checkpoints.list(state.task_id)[-1]
    messages = stack.store.checkpoints.read(latest.id).messages
    assert [m.role for m in messages[-3:]] == ["assistant", "user", "assistant"]
    assert messages[-2].content.startswith("Your answer does not match the required output (the answer is not JSON")


async def test_an_answer_that_cannot_match_fails_the_task_after_its_repairs(stack: Stack) -> None:
    class Digits(BaseModel):
        code: str = Field(pattern=r"^[0-9]{6}$")

    agent = Agent(unique("typed"), "llama-3.2-1b", "Give the code.", output_type=Digits)
    await stack.client.register(agent)
    task = await stack.client.submit(agent, "What is the code?", budget=Budget(tokens=20_000))
    with pytest.raises(TaskFailed) as failed:
        await task.result(timeout=120)
    assert "does not match the agent's output type after 2 repair step(s): code: " in failed.value.state.error
    assert failed.value.state.step == 3
