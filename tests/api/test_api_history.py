"""A task's history through the API: checkpoints, forks, the ledger, the event stream."""

from __future__ import annotations

import asyncio
import json

import httpx
from api_helpers import error_of, put_task, unique, write_checkpoints
from temporalio.client import Client as TemporalClient

from orchestrator.store import Store
from sdk import AgentSpec, TaskStatus
from sdk.wire.ledger import LedgerEntry
from sdk.wire.task_run import TaskRun


def parse_sse(text: str) -> list[dict]:
    """The messages of an event-stream body, each as {event, id, data}."""
    messages, current = [], {}
    for line in text.splitlines():
        if not line:
            if current:
                messages.append(current)
            current = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(": ")
            current[name] = value
    if current:
        messages.append(current)
    return messages


async def test_checkpoints_list_and_read_whole(api: httpx.AsyncClient, store: Store, agent: AgentSpec) -> None:
    task = put_task(store, agent)
    write_checkpoints(store, task.task_id)

    listing = (await api.get(f"/v1/tasks/{task.task_id}/checkpoints")).json()
    assert [(c["seq"], c["step"], c["message_count"]) for c in listing] == [(0, 0, 2), (1, 1, 4)]

    detail = (await api.get(f"/v1/tasks/{task.task_id}/checkpoints/1")).json()
    assert detail["ref"]["seq"] == 1 and detail["task_id"] == task.task_id
    assert [m["role"] for m in detail["messages"]] == ["system", "user", "assistant", "tool"]
    assert detail["messages"][2]["tool_calls"][0]["name"] == "lookup"
    assert detail["scratch"] == {"notes": ["looked up berth"]}
    assert detail["state"] == {"step": 1}

    missing = await api.get(f"/v1/tasks/{task.task_id}/checkpoints/7")
    assert missing.status_code == 404 and error_of(missing)["field"] == "checkpoint_seq"


async def test_a_task_without_checkpoints_lists_none(api: httpx.AsyncClient, store: Store, agent: AgentSpec) -> None:
    task = put_task(store, agent)
    assert (await api.get(f"/v1/tasks/{task.task_id}/checkpoints")).json() == []


async def test_fork_of_a_missing_checkpoint_is_404(api: httpx.AsyncClient, store: Store, agent: AgentSpec) -> None:
    task = put_task(store, agent, TaskStatus.completed)
    write_checkpoints(store, task.task_id)

    response = await api.post(f"/v1/tasks/{task.task_id}/fork", json={"checkpoint_seq": 5})

    assert response.status_code == 404
    assert error_of(response)["field"] == "checkpoint_seq"
    assert len(store.tasks.list()) == 1


async def test_fork_starts_a_new_task_from_the_checkpoint_with_overrides(
    api: httpx.AsyncClient, store: Store, agent: AgentSpec, temporal_client: TemporalClient
) -> None:
    source = put_task(store, agent, TaskStatus.out_of_budget)
    write_checkpoints(store, source.task_id)
    chosen = unique("fork")
    new_id = f"default:{chosen}"  # the fork is a task of the source's tenant, and a chosen id is the tenant's

    response = await api.post(
        f"/v1/tasks/{source.task_id}/fork",
        json={"checkpoint_seq": 1, "task_id": chosen, "budget": {"tokens": 9000}, "model": "llama-3.1-70b"},
    )

    assert response.status_code == 201, response.text
    state = response.json()
    assert state["task_id"] == new_id and state["status"] == "queued"
    assert state["model"] == "llama-3.1-70b" and state["spend"]["token_limit"] == 9000
    history = await temporal_client.get_workflow_handle(new_id).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    [run] = await temporal_client.data_converter.decode(started.input.payloads, [TaskRun])
    assert run.fork_of is not None
    assert (run.fork_of.task_id, run.fork_of.checkpoint_seq) == (source.task_id, 1)
    assert run.spec.input == "Summarise the report." and run.spec.budget.tokens == 9000
    assert run.agent.model == "llama-3.1-70b"

    again = await api.post(
        f"/v1/tasks/{source.task_id}/fork",
        json={"checkpoint_seq": 1, "task_id": new_id, "budget": {"tokens": 9000}, "model": "llama-3.1-70b"},
    )
    assert again.status_code == 200 and again.json()["task_id"] == new_id


async def test_fork_validates_its_overrides(api: httpx.AsyncClient, store: Store, agent: AgentSpec) -> None:
    source = put_task(store, agent, TaskStatus.completed)
    write_checkpoints(store, source.task_id)
    for body, field in [
        ({"checkpoint_seq": 0, "model": "no-such-model"}, "model"),
        ({"checkpoint_seq": 0, "budget": {"tokens": 0}}, "budget.tokens"),
        ({"checkpoint_seq": -1}, "checkpoint_seq"),
        ({"checkpoint_seq": 0, "seed": 3}, "seed"),
    ]:
        response = await api.post(f"/v1/tasks/{source.task_id}/fork", json=body)
        assert response.status_code == 422, body
        assert error_of(response)["field"] == field
    assert [s.task_id for s in store.tasks.list()] == [source.task_id]


async def test_ledger_lists_entries_and_totals(api: httpx.AsyncClient, store: Store, agent: AgentSpec) -> None:
    task = put_task(store, agent)
    for step, kind, completion in [(1, "settled", 40), (2, "lost", 12), (2, "settled", 50)]:
        store.ledger.record(
            LedgerEntry(
                task_id=task.task_id,
                step=step,
                attempt=1 if kind == "lost" or step == 1 else 2,
                model=agent.model,
                prompt_tokens=0 if kind == "lost" else 100,
                completion_tokens=completion,
                cost_usd=0.001,
                ttft_s=0.05,
                duration_s=0.4,
                served_by="node-a/gpu0",
                kind=kind,
            )
        )

    body = (await api.get(f"/v1/tasks/{task.task_id}/ledger")).json()

    assert [(e["step"], e["kind"]) for e in body["entries"]] == [(1, "settled"), (2, "lost"), (2, "settled")]
    assert body["entries"][0]["served_by"] == "node-a/gpu0"
    totals = body["totals"]
    assert totals["prompt_tokens"] == 200 and totals["completion_tokens"] == 90 and totals["lost_tokens"] == 12


async def test_events_stream_replays_the_log_and_ends_when_the_task_is_final(
    api: httpx.AsyncClient, store: Store, agent: AgentSpec
) -> None:
    task = put_task(store, agent)
    seqs = [store.events.append(task.task_id, kind, {"step": i}) for i, kind in enumerate(["state", "step", "step"])]
    store.tasks.save_state(task.model_copy(update={"status": TaskStatus.completed, "result": "done"}))

    response = await api.get(f"/v1/tasks/{task.task_id}/events")

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    messages = parse_sse(response.text)
    assert [(m["event"], int(m["id"])) for m in messages[:-1]] == list(zip(["state", "step", "step"], seqs))
    assert [json.loads(m["data"])["data"] for m in messages[:-1]] == [{"step": 0}, {"step": 1}, {"step": 2}]
    assert messages[-1]["event"] == "end" and json.loads(messages[-1]["data"])["status"] == "completed"


async def test_events_resume_after_a_seq_or_the_last_event_id(
    api: httpx.AsyncClient, store: Store, agent: AgentSpec
) -> None:
    task = put_task(store, agent, TaskStatus.failed)
    seqs = [store.events.append(task.task_id, "step", {"step": i}) for i in range(3)]

    after_query = parse_sse((await api.get(f"/v1/tasks/{task.task_id}/events", params={"after": seqs[0]})).text)
    after_header = parse_sse(
        (await api.get(f"/v1/tasks/{task.task_id}/events", headers={"Last-Event-ID": str(seqs[1])})).text
    )

    assert [int(m["id"]) for m in after_query if m["event"] != "end"] == seqs[1:]
    assert [int(m["id"]) for m in after_header if m["event"] != "end"] == seqs[2:]


async def test_numbers_beyond_what_the_store_holds_are_422_naming_the_field(
    api: httpx.AsyncClient, store: Store, agent: AgentSpec
) -> None:
    """The store's integers are 64-bit: a bigger seq or offset used to reach the driver and come back a 500."""
    task = put_task(store, agent, TaskStatus.completed)
    write_checkpoints(store, task.task_id)
    too_big = 2**63
    for method, path, params, body, field in (
        ("GET", f"/v1/tasks/{task.task_id}/events", {"after": too_big}, None, "after"),
        ("GET", f"/v1/tasks/{task.task_id}/checkpoints/{too_big}", None, None, "seq"),
        ("POST", f"/v1/tasks/{task.task_id}/fork", None, {"checkpoint_seq": too_big}, "checkpoint_seq"),
        ("GET", "/v1/audit", {"offset": too_big}, None, "offset"),
    ):
        refused = await api.request(method, path, params=params, json=body)
        assert refused.status_code == 422 and error_of(refused)["field"] == field, (path, refused.text)
    # A reconnecting client's Last-Event-ID is only a hint: one out of range replays the log, as junk does.
    replayed = await api.get(f"/v1/tasks/{task.task_id}/events", headers={"Last-Event-ID": str(too_big)})
    assert replayed.status_code == 200 and parse_sse(replayed.text)[-1]["event"] == "end"


async def test_events_follow_a_live_task_to_its_end(api: httpx.AsyncClient, store: Store, agent: AgentSpec) -> None:
    task = put_task(store, agent)
    first = store.events.append(task.task_id, "state", {"status": "running"})

    async def workflow_progress() -> list[int]:
        await asyncio.sleep(0.5)  # let the stream drain the first event and start waiting
        written = [await asyncio.to_thread(store.events.append, task.task_id, "step", {"step": 1})]
        final = task.model_copy(update={"status": TaskStatus.completed})
        await asyncio.to_thread(store.tasks.save_state, final)
        # The workflow appends its state event just after saving the final state.
        written.append(await asyncio.to_thread(store.events.append, task.task_id, "state", {"status": "completed"}))
        return written

    progress = asyncio.create_task(workflow_progress())
    response = await api.get(f"/v1/tasks/{task.task_id}/events")
    later = await progress

    messages = parse_sse(response.text)
    assert [int(m["id"]) for m in messages if m["event"] != "end"] == [first, *later]
    assert messages[-1]["event"] == "end"
