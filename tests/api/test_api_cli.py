"""`berth` task and agent commands against a real uvicorn server of the app on a loopback port."""

from __future__ import annotations

import asyncio
import json
import shlex
import socket
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import uvicorn
from api_helpers import put_task, unique, write_checkpoints
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from orchestrator.api import TemporalGateway
from orchestrator.cli.main import main
from orchestrator.config import BerthConfig
from orchestrator.server import create_app
from orchestrator.store import Store
from sdk import AgentSpec, Budget, LatencyObjectives, SyncClient, TaskCancelled, TaskStatus, ToolSpec
from sdk.wire.catalogue import KeepAliveView, ModelForesight, PrewarmView
from sdk.wire.identity import Role, TenantSpec


@dataclass
class Server:
    url: str
    store: Store
    key: str  # an admin key


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
async def server(temporal_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Server]:
    data = tmp_path_factory.mktemp("cli")
    config = BerthConfig(data_dir=data, database_url=f"sqlite:///{data}/berth.db")
    store = Store.open(config.resolved_database_url)
    # The gateway connects from the server's own event loop (lazily), not from the tests' loop.
    gateway = TemporalGateway(temporal_env.client.service_client.config.target_host, temporal_env.client.namespace)
    port = _free_port()
    uv = uvicorn.Server(
        uvicorn.Config(create_app(config, store, gateway), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=uv.run, name="berth-api-under-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not uv.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the API server did not start"
        await asyncio.sleep(0.05)
    try:
        store.tenants.create(TenantSpec(name="acme"))
        yield Server(f"http://127.0.0.1:{port}", store, store.keys.create(Role.admin, name="cli tests").key)
    finally:
        uv.should_exit = True
        await asyncio.to_thread(thread.join, 30)
        for state in store.tasks.list(limit=500):
            try:
                await temporal_env.client.get_workflow_handle(state.task_id).terminate("CLI test over")
            except RPCError:
                pass
        store.close()


@pytest.fixture
def agent(server: Server) -> AgentSpec:
    return server.store.agents.register(
        AgentSpec(
            name=unique("clerk"),
            model="llama-3.1-8b",
            max_steps=9,
            tools=[ToolSpec(name="file", description="File it.")],
        )
    )


def berth(server: Server, *argv: str) -> int:
    return main([*argv, "--api", server.url, "--api-key", server.key])


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    return lines[0]


def test_submit_prints_the_task_id_and_starts_it(server: Server, agent: AgentSpec, capsys) -> None:
    task_id = unique("t")
    code = berth(
        server,
        "submit",
        agent.name,
        "--input",
        "File the report.",
        "--budget",
        "4000",
        "--usd",
        "1.5",
        "--task-id",
        task_id,
        "--tenant",
        "acme",
    )

    out = capsys.readouterr().out
    assert code == 0 and out.strip() == f"acme:{task_id}"  # a chosen id is its tenant's
    record = server.store.tasks.get(f"acme:{task_id}")
    assert record is not None and record.state.tenant == "acme" and record.state.spend.usd_limit == 1.5


def test_submit_reads_the_input_from_a_file(server: Server, agent: AgentSpec, tmp_path: Path, capsys) -> None:
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("Summarise the attached minutes.")

    assert berth(server, "submit", agent.name, "--input-file", str(prompt), "--budget", "500") == 0
    task_id = capsys.readouterr().out.strip()
    assert "attached minutes" in (server.store.tasks.get(task_id).spec_json or "")


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--input", "hi", "--budget", "0"], "budget.tokens"),
        (["--input", "hi", "--budget", "10", "--usd", "-1"], "budget.usd"),
        (["--input", " ", "--budget", "10"], "input"),
        (["--input", "hi", "--budget", "10", "--model", "gpt-17"], "model"),
        (["--input", "hi", "--budget", "10", "--priority", "11"], "priority"),
        (["--input-file", "/nonexistent/prompt.txt", "--budget", "10"], "input-file"),
        (["--input", "hi", "--budget", "10", "--attainment", "2"], "attainment"),
        (["--input", "hi", "--budget", "10", "--ttft-s", "soon"], "ttft-s"),
    ],
    ids=[
        "zero-budget",
        "negative-usd",
        "blank-input",
        "unknown-model",
        "priority",
        "missing-file",
        "attainment-over-1",
        "ttft-not-a-number",
    ],
)
def test_bad_submissions_print_one_line_and_exit_2(
    server: Server, agent: AgentSpec, capsys, argv: list[str], field: str
) -> None:
    before = len(server.store.tasks.list(agent=agent.name))

    code = berth(server, "submit", agent.name, *argv)

    captured = capsys.readouterr()
    assert code == 2
    assert one_error_line(captured.err).startswith(f"error: {field}: ")
    assert captured.out == ""
    assert len(server.store.tasks.list(agent=agent.name)) == before


def test_submitting_to_an_unregistered_agent_names_the_agent(server: Server, capsys) -> None:
    assert berth(server, "submit", unique("nobody"), "--input", "hi", "--budget", "10") == 2
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith("error: agent: ") and "not registered" in line


def test_refusals_of_task_commands_exit_2(server: Server, agent: AgentSpec, capsys) -> None:
    done = put_task(server.store, agent, TaskStatus.completed, result="filed")
    for argv, prefix in [
        (["tasks", "show", unique("missing")], "error: task_id: "),
        (["tasks", "raise-budget", done.task_id, "0"], "error: tokens: "),
        (["tasks", "cancel", done.task_id], "error: task_id: task "),
        (["tasks", "list", "--status", "sleeping"], "error: status: "),
        (["tasks", "fork", done.task_id, "--checkpoint", "4"], "error: checkpoint_seq: "),
        (["agents", "show", unique("ghost")], "error: name: "),
    ]:
        code = berth(server, *argv)
        assert code == 2, argv
        assert one_error_line(capsys.readouterr().err).startswith(prefix), argv


def test_an_unreachable_api_is_one_line_and_exit_1(capsys) -> None:
    port = _free_port()
    assert main(["tasks", "list", "--api", f"http://127.0.0.1:{port}"]) == 1
    assert "cannot reach the Berth API" in one_error_line(capsys.readouterr().err)


def test_list_show_checkpoints_and_events(server: Server, agent: AgentSpec, capsys) -> None:
    done = put_task(server.store, agent, TaskStatus.completed, result="the filing is done", step=1)
    write_checkpoints(server.store, done.task_id)
    server.store.events.append(done.task_id, "step", {"step": 1, "tokens_used": 120})

    assert berth(server, "tasks", "list", "--agent", agent.name) == 0
    assert done.task_id in capsys.readouterr().out

    assert berth(server, "tasks", "show", done.task_id) == 0
    shown = capsys.readouterr().out
    assert "completed" in shown and "the filing is done" in shown and "checkpoints  2" in shown
    assert "0 calls" in shown

    assert berth(server, "tasks", "checkpoints", done.task_id) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert [r[0] for r in rows] == ["0", "1"]

    assert berth(server, "tasks", "events", done.task_id) == 0
    assert "tokens_used=120" in capsys.readouterr().out


def test_a_list_cut_at_its_limit_says_so_and_where_the_next_page_starts(
    server: Server, agent: AgentSpec, capsys
) -> None:
    made = [put_task(server.store, agent, TaskStatus.completed, result=f"r{i}").task_id for i in range(3)]

    assert berth(server, "tasks", "list", "--agent", agent.name, "--limit", "2") == 0
    first = capsys.readouterr()
    assert sum(task in first.out for task in made) == 2
    assert "showing tasks 1-2, newest first; more match: --offset 2 for the next page" in first.err

    assert berth(server, "tasks", "list", "--agent", agent.name, "--limit", "2", "--offset", "2") == 0
    rest = capsys.readouterr()
    assert sum(task in rest.out for task in made) == 1 and rest.err == ""  # the whole list: nothing more to say
    for argv, prefix in [(["--limit", "0"], "error: limit: "), (["--offset", "-1"], "error: offset: ")]:
        assert berth(server, "tasks", "list", *argv) == 2
        assert one_error_line(capsys.readouterr().err).startswith(prefix)


def test_agents_list_and_show(server: Server, agent: AgentSpec, capsys) -> None:
    assert berth(server, "agents", "list") == 0
    assert agent.name in capsys.readouterr().out
    assert berth(server, "agents", "show", agent.name) == 0
    shown = capsys.readouterr().out
    assert agent.version in shown and "file: File it." in shown


def test_fork_prints_the_new_task(server: Server, agent: AgentSpec, capsys) -> None:
    source = put_task(server.store, agent, TaskStatus.out_of_budget)
    write_checkpoints(server.store, source.task_id)

    assert berth(server, "tasks", "fork", source.task_id, "--checkpoint", "1", "--budget", "7000") == 0
    forked = capsys.readouterr().out.strip()
    assert server.store.tasks.get(forked).state.spend.token_limit == 7000


def test_cancel_a_queued_task(server: Server, agent: AgentSpec, capsys) -> None:
    assert berth(server, "submit", agent.name, "--input", "Wait.", "--budget", "100") == 0
    task_id = capsys.readouterr().out.strip()
    assert berth(server, "tasks", "cancel", task_id) == 0
    assert f"cancel requested for {task_id}" in capsys.readouterr().out


def test_a_tenants_key_names_its_task_by_the_id_it_chose(server: Server, agent: AgentSpec, capsys) -> None:
    key = server.store.keys.create(Role.operator, "acme", name="cli tests acme").key
    chosen = unique("t")

    def as_acme(*argv: str) -> int:
        return main([*argv, "--api", server.url, "--api-key", key])

    assert as_acme("submit", agent.name, "--input", "Wait.", "--budget", "100", "--task-id", chosen) == 0
    assert capsys.readouterr().out.strip() == f"acme:{chosen}"
    assert as_acme("tasks", "show", chosen) == 0
    assert f"acme:{chosen}" in capsys.readouterr().out
    assert as_acme("tasks", "cancel", chosen) == 0
    assert f"cancel requested for acme:{chosen}" in capsys.readouterr().out
    assert berth(server, "tasks", "show", chosen) == 2  # a key of every tenant names it whole
    assert f"'<tenant>:{chosen}'" in one_error_line(capsys.readouterr().err)


@pytest.fixture
def finisher(server: Server) -> Iterator:
    """Plays the workflow's part for one task id: once its row exists, steps it to a final state.

    It may finish before or while `--wait` follows; either way the progress shows the final spend.
    """
    threads: list[threading.Thread] = []

    def start(task_id: str, status: TaskStatus, result: str | None, error: str | None = None) -> None:
        def run() -> None:
            deadline = time.monotonic() + 30
            while (record := server.store.tasks.get(task_id)) is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert record is not None
            running = record.state.model_copy(update={"status": TaskStatus.running})
            server.store.tasks.save_state(running)
            server.store.events.append(task_id, "state", {"status": "running", "step": 0, "tokens_used": 0})
            server.store.events.append(task_id, "step", {"step": 1, "tokens_used": 640, "token_limit": 1000})
            spend = running.spend.model_copy(update={"tokens_used": 640})
            final = running.model_copy(
                update={"status": status, "result": result, "error": error, "step": 1, "spend": spend}
            )
            server.store.tasks.save_state(final)
            server.store.events.append(task_id, "state", {"status": status.value, "step": 1, "tokens_used": 640})

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        threads.append(thread)

    yield start
    for thread in threads:
        thread.join(30)


def test_submit_wait_follows_progress_and_prints_the_result(server: Server, agent: AgentSpec, finisher, capsys) -> None:
    task_id = f"default:{unique('t')}"  # chosen with its tenant in front: the id as given
    finisher(task_id, TaskStatus.completed, "report filed under F")

    code = berth(
        server, "submit", agent.name, "--input", "File it.", "--budget", "1000", "--task-id", task_id, "--wait"
    )

    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.out.splitlines() == [task_id, "report filed under F"]
    assert "tokens 640/1,000" in captured.err and "completed" in captured.err


def test_submit_wait_exits_1_when_the_task_does_not_complete(
    server: Server, agent: AgentSpec, finisher, capsys
) -> None:
    task_id = f"default:{unique('t')}"
    finisher(task_id, TaskStatus.out_of_budget, "half a report", "token budget exhausted")

    code = berth(
        server, "submit", agent.name, "--input", "File it.", "--budget", "1000", "--task-id", task_id, "--wait"
    )

    captured = capsys.readouterr()
    assert code == 1
    assert f"task {task_id} ended out_of_budget: token budget exhausted" in captured.err
    assert captured.out.splitlines() == [task_id, "half a report"]


def test_sync_client_mirrors_the_async_one(server: Server, agent: AgentSpec) -> None:
    cancelled = put_task(server.store, agent, TaskStatus.cancelled, error="by request")
    server.store.events.append(cancelled.task_id, "state", {"status": "cancelled"})

    with SyncClient(server.url, server.key) as client:
        handle = client.submit(agent.name, "Sort the mail.", Budget(tokens=800))
        assert handle.status().status == TaskStatus.queued
        assert handle.task_id in [s.task_id for s in client.tasks(agent=agent.name)]
        assert agent.name in [a.name for a in client.agents()]
        ended = client.task(cancelled.task_id)
        assert [e.kind for e in ended.events()] == ["state"]
        with pytest.raises(TaskCancelled):
            ended.result(timeout=30)


def test_the_installed_berth_command_prints_only_the_error_line(server: Server) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.cli.main",
            "tasks",
            "show",
            unique("missing"),
            "--api",
            server.url,
            "--api-key",
            server.key,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert one_error_line(done.stderr).startswith("error: task_id: ")


def test_models_list_show_and_policy(server: Server, capsys) -> None:
    assert berth(server, "models", "list") == 0
    listed = capsys.readouterr().out
    assert "llama-3.1-70b" in listed and "131.5 GiB" in listed
    assert berth(server, "models", "show", "openai/gpt-4o-mini") == 0
    shown = capsys.readouterr().out
    assert "hosted (openai/gpt-4o-mini)" in shown and "keep-alive: none here, the provider serves this model" in shown
    assert berth(server, "models", "show", "llama-3.1-70b") == 0
    panel = capsys.readouterr().out
    assert "131.5 GiB weights + 20.0 GiB KV = 151.5 GiB" in panel and "idle window learned" in panel
    assert berth(server, "models", "show", "openai/gpt-4o-mini", "-o", "json") == 0
    assert json.loads(capsys.readouterr().out)["entry"]["provider"] == "hosted"
    assert berth(server, "models", "policy", "qwen2.5-7b", "--min", "1", "--max", "2") == 0
    assert '"max_replicas": 2' in capsys.readouterr().out
    assert berth(server, "models", "policy", "qwen2.5-7b", "--min", "5") == 2
    assert "above max_replicas" in one_error_line(capsys.readouterr().err)
    assert berth(server, "models", "show", "no-such-model") == 2
    assert "no-such-model" in one_error_line(capsys.readouterr().err)


def test_models_show_prints_the_learned_keep_alive_and_each_prewarm_used_or_not(server: Server, capsys) -> None:
    at = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
    server.store.models.publish_foresight(
        {
            "llama-3.2-1b": ModelForesight(
                keep_alive=[
                    KeepAliveView(level=1, window_s=720, prewarm_s=0, source="learned", gaps=254),
                    KeepAliveView(level=2, window_s=2400, prewarm_s=900, source="learned", gaps=40),
                    KeepAliveView(level=3, window_s=180, prewarm_s=0, source="break-even", gaps=3),
                ],
                prewarms=[
                    PrewarmView(
                        replica_id="r-used",
                        started_at=at,
                        reason="2 announced steps [soon]",
                        used_at=at + timedelta(seconds=80),
                    ),
                    PrewarmView(
                        replica_id="r-wasted",
                        started_at=at,
                        reason="level 2 pre-warm",
                        ended_at=at + timedelta(minutes=15),
                    ),
                ],
                announced=3,
                intent_gpu_hours_last_hour=0.42,
                updated_at=at,
            )
        }
    )
    assert berth(server, "models", "show", "llama-3.2-1b") == 0
    out = capsys.readouterr().out
    assert "idle window learned" in out  # the policy leaves it unset
    assert "level 1: keep 12.0 min idle (learned from 254 gaps)" in out
    assert (
        "level 2: unload at once, pre-warm at 15.0 min after it goes idle, keep until 40.0 min idle"
        " (learned from 40 gaps)"
    ) in out
    assert "level 3: keep 3.0 min idle (break-even: kept until holding it has cost one cold start (3 gaps" in out
    assert "announced steps: 3 not arrived yet" in out
    assert "intent GPU-hours, last hour: 0.42 of 2 allowed per hour" in out
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip().startswith("r-")}
    assert "2 announced steps [soon]" in rows["r-used"]  # printed as text, not read as markup
    assert "yes, at 2026-11-30 08:01:20 UTC (80 s after it started)" in rows["r-used"]
    assert rows["r-used"].rstrip().endswith("still up")
    assert " no " in rows["r-wasted"] and rows["r-wasted"].rstrip().endswith("2026-11-30 08:15:00 UTC")
    assert berth(server, "models", "show", "llama-3.2-1b", "--json") == 0
    assert '"replica_id": "r-wasted"' in capsys.readouterr().out
    assert berth(server, "models", "list") == 0
    listed = {line.split("│")[1].strip(): line for line in capsys.readouterr().out.splitlines() if "│" in line}
    assert "learned 12 min" in listed["llama-3.2-1b"]
    assert berth(server, "models", "show", "llama-3.1-70b") == 0
    assert "the scaler has not planned for this model yet" in capsys.readouterr().out


def test_models_policy_sets_an_idle_timeout_resets_it_to_learned_and_names_a_bad_field(server: Server, capsys) -> None:
    assert berth(server, "models", "policy", "qwen2.5-7b", "--idle-timeout", "120", "--intent-gpu-hours", "0.5") == 0
    out = capsys.readouterr().out
    assert '"idle_timeout_s": 120.0' in out and '"intent_gpu_hours_per_hour": 0.5' in out
    assert berth(server, "models", "list") == 0
    assert "120s" in next(line for line in capsys.readouterr().out.splitlines() if "qwen2.5-7b" in line)
    assert berth(server, "models", "policy", "qwen2.5-7b", "--idle-timeout", "learned") == 0
    assert '"idle_timeout_s": null' in capsys.readouterr().out
    policy = server.store.models.get("qwen2.5-7b").policy
    assert (policy.idle_timeout_s, policy.intent_gpu_hours_per_hour) == (None, 0.5)
    assert berth(server, "models", "policy", "qwen2.5-7b", "--idle-timeout", "soon") == 2
    assert one_error_line(capsys.readouterr().err) == "error: idle_timeout_s: must be seconds, or 'learned', not 'soon'"
    assert berth(server, "models", "policy", "qwen2.5-7b", "--idle-timeout", "0") == 2
    assert one_error_line(capsys.readouterr().err).startswith("error: idle_timeout_s: ")
    assert berth(server, "models", "policy", "qwen2.5-7b", "--intent-gpu-hours", "-1") == 2
    assert one_error_line(capsys.readouterr().err).startswith("error: intent_gpu_hours_per_hour: ")
    assert berth(server, "models", "policy", "qwen2.5-7b", "--min", "one") == 2
    assert one_error_line(capsys.readouterr().err) == "error: min_replicas: must be a whole number, not 'one'"
    assert server.store.models.get("qwen2.5-7b").policy == policy  # nothing refused was saved


def test_keys_create_prints_the_secret_once_list_hides_it_and_revoke_refuses_it(server: Server, capsys) -> None:
    assert berth(server, "keys", "create", "--role", "agent", "--tenant", "acme", "--name", "tools") == 0
    key = capsys.readouterr().out.strip()
    key_id = key.split("_")[1]
    assert key.startswith("berth_") and server.store.keys.authenticate(key).tenant == "acme"

    assert berth(server, "keys", "list") == 0
    listed = capsys.readouterr().out
    assert key_id in listed and "acme" in listed and key.split("_", 2)[2] not in listed

    assert berth(server, "keys", "revoke", key_id) == 0
    assert "revoked" in capsys.readouterr().out
    assert main(["tasks", "list", "--api", server.url, "--api-key", key]) == 2
    assert "revoked" in one_error_line(capsys.readouterr().err)

    assert berth(server, "keys", "create", "--role", "admin", "--tenant", "acme") == 2
    assert one_error_line(capsys.readouterr().err).startswith("error: tenant: ")


def test_tenants_create_list_show_update(server: Server, capsys) -> None:
    name = unique("fleet")
    assert (
        berth(server, "tenants", "create", name, "--trust", "isolated", "--gpu-quota", "4", "--budget-tokens", "900")
        == 0
    )
    assert berth(server, "tenants", "update", name, "--gpu-quota", "none", "--budget-usd", "1.5") == 0
    capsys.readouterr()
    assert berth(server, "tenants", "show", name) == 0
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row == [name, "isolated", "-", "900", "$1.5", "-"]  # no objectives: the class's
    assert berth(server, "tenants", "list") == 0
    assert name in capsys.readouterr().out
    assert berth(server, "tenants", "create", name) == 2
    assert "already exists" in one_error_line(capsys.readouterr().err)
    assert berth(server, "tenants", "update", name, "--trust", "open") == 2
    assert one_error_line(capsys.readouterr().err).startswith("error: trust: ")


def test_tenants_set_objectives_field_by_field_and_none_clears_one(server: Server, capsys) -> None:
    name = unique("slo")
    assert berth(server, "tenants", "create", name, "--ttft-s", "2") == 0
    assert berth(server, "tenants", "update", name, "--tpot-s", "0.1", "--attainment", "0.95") == 0
    assert server.store.tenants.get(name).objectives == LatencyObjectives(  # type: ignore[union-attr]
        ttft_s=2, tpot_s=0.1, attainment=0.95
    )
    assert berth(server, "tenants", "update", name, "--ttft-s", "none") == 0
    capsys.readouterr()
    assert berth(server, "tenants", "show", name) == 0
    assert "≤ 100 ms a token after it, for 95% of calls" in capsys.readouterr().out
    assert server.store.tenants.get(name).objectives.ttft_s is None  # type: ignore[union-attr]
    assert berth(server, "tenants", "update", name, "--attainment", "0.1") == 2
    assert one_error_line(capsys.readouterr().err).startswith("error: attainment: ")


def test_submit_sets_a_tasks_objectives_and_show_prints_what_they_came_to(
    server: Server, agent: AgentSpec, capsys
) -> None:
    tenant = unique("slo")
    assert berth(server, "tenants", "create", tenant, "--attainment", "0.95") == 0
    capsys.readouterr()
    argv = ["--input", "File it.", "--budget", "500", "--tenant", tenant, "--ttft-s", "0.5", "--tpot-s", "0.04"]

    assert berth(server, "submit", agent.name, *argv) == 0

    task_id = capsys.readouterr().out.strip()
    record = server.store.tasks.get(task_id)
    assert record is not None
    assert record.state.objectives == LatencyObjectives(ttft_s=0.5, tpot_s=0.04, attainment=0.95)
    assert berth(server, "tasks", "show", task_id) == 0
    assert "objectives   first token ≤ 500 ms, ≤ 40 ms a token after it, for 95% of calls" in capsys.readouterr().out


def test_agents_show_prints_the_objectives_an_agent_registered(server: Server, capsys) -> None:
    strict = server.store.agents.register(
        AgentSpec(name=unique("quick"), model="llama-3.1-8b", objectives=LatencyObjectives(ttft_s=0.3))
    )
    assert berth(server, "agents", "show", strict.name) == 0
    assert "first token ≤ 300 ms (over its tenant's; a task's own win)" in capsys.readouterr().out


def test_the_cli_finds_the_admin_key_berth_up_left_in_the_data_dir(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.delenv("BERTH_API_KEY", raising=False)
    monkeypatch.setenv("BERTH_DATA_DIR", str(tmp_path))
    assert main(["tasks", "list", "--api", server.url]) == 2
    assert one_error_line(capsys.readouterr().err).startswith("error: authorization: ")
    (tmp_path / "admin-key").write_text(server.key + "\n")
    assert main(["tasks", "list", "--api", server.url]) == 0


def test_every_listing_and_show_speaks_json_for_scripts(server: Server, agent: AgentSpec, capsys) -> None:
    done = put_task(server.store, agent, TaskStatus.completed, result="filed", step=1)
    write_checkpoints(server.store, done.task_id)
    for argv, check in [
        (["tasks", "list", "--agent", agent.name], lambda v: [t["task_id"] for t in v] == [done.task_id]),
        (["tasks", "show", done.task_id], lambda v: v["state"]["result"] == "filed" and len(v["checkpoints"]) == 2),
        (["tasks", "checkpoints", done.task_id], lambda v: [c["seq"] for c in v] == [0, 1]),
        (["agents", "show", agent.name], lambda v: v["name"] == agent.name),
        (["agents", "list"], lambda v: agent.name in {a["name"] for a in v}),
        (["models", "list"], lambda v: "llama-3.1-70b" in {m["entry"]["name"] for m in v}),
        (["nodes", "list"], lambda v: v == []),
        (["keys", "list"], lambda v: any(k["name"] == "cli tests" for k in v)),
        (["tenants", "list"], lambda v: "acme" in {t["name"] for t in v}),
        (["tenants", "show", "acme"], lambda v: v["name"] == "acme"),
    ]:
        assert berth(server, *argv, "-o", "json") == 0, argv
        assert check(json.loads(capsys.readouterr().out)), argv


def test_version_prints_the_installed_distributions(capsys) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0 and capsys.readouterr().out.strip() == f"berth {version('berth-platform')}"


def test_nodes_show_is_a_panel_in_gib_with_gpu_numbers_marked_as_such() -> None:
    from rich.console import Console

    from orchestrator.cli.nodes import node_panel
    from sdk import NodeView

    node = NodeView.model_validate(
        {
            "node_id": "gpu-east-a",
            "datacenter": "east",
            "zone": "east-1a",
            "capacity": "spot",
            "usd_per_hour": 12.5,
            "disk_bandwidth_gbps": 2.0,
            "weights_cache_capacity_bytes": 200 * 2**30,
            "status": "healthy",
            "registered_at": "2026-12-03T00:00:00Z",
            "gpus": [
                {
                    "index": 0,
                    "type_name": "H100-80GB",
                    "memory_total_mib": 81920,
                    "memory_used_mib": 50688,
                    "utilization_pct": 61,
                }
            ],
            "cached_weights": [{"model": "llama-3.1-8b", "size_bytes": 15 * 2**30}],
            "replicas": [
                {
                    "replica_id": "r1",
                    "node_id": "gpu-east-a",
                    "datacenter": "east",
                    "zone": "east-1a",
                    "model": "llama-3.1-8b",
                    "gpu_indexes": [0],
                    "state": "warm",
                    "active_leases": 2,
                    "outstanding_tokens": 1200,
                }
            ],
        }
    )
    console = Console(width=200, record=True)
    console.print(node_panel(node))
    text = console.export_text()
    assert "east/east-1a, spot, $12.50/h" in text and "15.0 GiB of 200.0 GiB: llama-3.1-8b" in text
    assert "49.5 / 80.0 GiB" in text and "61%" in text
    replica = next(line for line in text.splitlines() if line.strip().startswith("r1"))
    assert replica.split()[:5] == ["r1", "llama-3.1-8b", "#0", "warm", "2"] and "1,200" in replica


@pytest.mark.parametrize(
    "typed, offered",
    [
        (["berth", "t"], ["tasks", "tenants"]),
        (["berth", "tasks", "l"], ["list"]),
        (["berth", "models", "prewarm", "qwen2.5-7b", "--w"], ["--wait"]),
        (["berth", "tasks", "list", "--status", "running", "-"], None),  # every flag of tasks list
    ],
)
def test_bash_completion_offers_what_the_parser_takes(typed: list[str], offered: list[str] | None, capsys) -> None:
    assert main(["completion", "bash"]) == 0
    script = capsys.readouterr().out
    words = " ".join(shlex.quote(w) for w in typed)
    probe = f'{script}\nCOMP_WORDS=({words}); COMP_CWORD={len(typed) - 1}; _berth; printf "%s\\n" "${{COMPREPLY[@]}}"'
    got = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    if offered is None:
        assert {"--status", "--agent", "--limit", "--offset", "--output", "--api"} <= set(got)
    else:
        assert sorted(got) == offered
