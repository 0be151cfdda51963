"""The real model end to end: SmolLM2-135M through llama.cpp on two CPU nodes of one `berth up`, its weights
real bytes from its origin, and one node killed (with its replica) in the middle of an answer.

Each node fetches the GGUF into its own content-addressed cache, starts Berth's llama.cpp server on that copy
and generates on the CPU. The answer a task gets is the model's own text, the books hold what the engines
journaled, and a generation cut by a kill -9 goes on, from the text its last heartbeat carried, on the other node.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Iterator

import pytest
from temporalio.client import Client

from sdk import Budget, SyncClient, TaskStatus
from tests.system.conftest import Stack, fleet_stack, wait_until

pytest.importorskip("llama_cpp", reason="make installs llama-cpp-python (the real model's engine)")

FLEET = [
    {"node_id": "cpu-a", "datacenter": "east", "zone": "east-1a", "gpus": "1xCPU-16GB"},
    {"node_id": "cpu-b", "datacenter": "east", "zone": "east-1b", "gpus": "1xCPU-16GB"},
]
MODEL = "smollm2-135m"


@pytest.fixture(scope="module")
def cpu_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with fleet_stack(tmp_path_factory.mktemp("real"), FLEET, env={"BERTH_NODE_LOST_AFTER_S": "6"}) as stack:
        yield stack


def test_a_question_is_answered_by_the_model_from_weights_it_fetched_and_verified(cpu_stack: Stack) -> None:
    client = SyncClient(cpu_stack.api, cpu_stack.admin_key())
    handle = client.submit(
        "ask", "What is the capital of France?", budget=Budget(2_000), task_id="default:real-ask", model=MODEL
    )
    handle.result(timeout=300)
    state = handle.status()
    assert state.status == TaskStatus.completed and state.result, state.error
    [call] = [e.data for e in handle.events() if e.kind == "llm_call"]
    assert call["node_id"] in ("cpu-a", "cpu-b") and call["gpu_type"] == "CPU-16GB" and call["tier"] == "origin"
    node = client.node(call["node_id"])
    assert [w.model for w in node.cached_weights] == [MODEL]  # real bytes on its disk, reported as such
    # The books are the engine's own count: one call, every prompt and answer token it journaled.
    ledger = cpu_stack.http.get("/v1/tasks/default:real-ask/ledger").json()["totals"]
    engine = cpu_stack.engine_usage("default:real-ask")
    assert (ledger["calls"], ledger["prompt_tokens"], ledger["completion_tokens"]) == (
        engine["requests"],
        engine["prompt_tokens"],
        engine["completion_tokens"],
    ), (ledger, engine)


def _pending_generation_text(stack: Stack, task_id: str) -> str:
    """What the step's generation has written so far, as its last heartbeat told Temporal."""

    async def read() -> str:
        temporal = await Client.connect(f"127.0.0.1:{stack.env['BERTH_TEMPORAL_PORT']}")
        description = await temporal.get_workflow_handle(task_id).describe()
        for pending in description.raw_description.pending_activities:
            if pending.activity_type.name == "berth.generate" and pending.heartbeat_details.payloads:
                details = (await temporal.data_converter.decode(pending.heartbeat_details.payloads))[0]
                return str(details.get("prefix", "")) if isinstance(details, dict) else ""
        return ""

    return asyncio.run(read())


def _generating_on(stack: Stack) -> str | None:
    """The node of the one replica with a lease held, as its node's heartbeats report it (every 2 s)."""
    busy = [r["node_id"] for r in stack.http.get("/v1/replicas").json() if r["active_leases"]]
    return busy[0] if len(busy) == 1 else None


def test_a_node_killed_mid_answer_leaves_its_text_to_the_other_node_which_goes_on_from_it(cpu_stack: Stack) -> None:
    client = SyncClient(cpu_stack.api, cpu_stack.admin_key())
    task_id = "default:real-essay"
    handle = client.submit("essay", "the history of Paris", budget=Budget(6_000), task_id=task_id, model=MODEL)
    written = wait_until(
        lambda: len(_pending_generation_text(cpu_stack, task_id)) > 40 and _pending_generation_text(cpu_stack, task_id),
        240,
        "the essay's first words",
    )
    node = wait_until(lambda: _generating_on(cpu_stack), 30, "the essay's replica to report its lease")
    os.kill(cpu_stack.child_pid(node), signal.SIGKILL)  # the machine is gone: its replica with it
    found = subprocess.run(["pgrep", "-f", f"node/{node}/replica-logs"], capture_output=True, text=True)
    for pid in found.stdout.split():
        os.kill(int(pid), signal.SIGKILL)
    handle.result(timeout=300)
    state = handle.status()
    assert state.status == TaskStatus.completed and state.spend.tokens_used <= 6_000, state.error
    [cut] = [e.data for e in handle.interruptions()]
    assert cut["node_id"] == node and cut["resumed_on"] != node and cut["tokens_kept"] > 0, cut
    assert state.result is not None and state.result.strip().startswith(written.strip())  # went on from it, not anew
    ledger = cpu_stack.http.get(f"/v1/tasks/{task_id}/ledger").json()["totals"]
    assert ledger["kept_tokens"] == cut["tokens_kept"]
    # What the surviving engine journaled is all booked (the killed one's journal died with its unfinished call).
    engine = cpu_stack.engine_usage(task_id)
    assert ledger["completion_tokens"] >= engine["completion_tokens"], (ledger, engine)
