"""`berth` as a real process against the real app served on a loopback port: what the CLI sends for a key confined
to a tenant, and what it refuses before sending anything."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

from orchestrator.store import Store
from sdk import AgentSpec
from sdk.wire.identity import Role, TenantSpec
from sdk.wire.limits import MAX_REASON_CHARS

ROOT = Path(__file__).resolve().parents[2]
CLI_TIMEOUT_S = 120.0  # a whole `berth` run: generous for a loaded 2-core machine


async def berth(*argv: str) -> subprocess.CompletedProcess[str]:
    """`berth …` in a process of its own (off this event loop, which serves the API it calls)."""
    env = {k: v for k, v in os.environ.items() if k not in ("BERTH_API_KEY", "BERTH_API_URL")}
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "orchestrator.cli.main", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
    )


async def test_berth_submit_with_an_agent_key_submits_for_the_keys_tenant(api_url: str, store: Store) -> None:
    tenant = f"t{uuid.uuid4().hex[:8]}"
    store.tenants.create(TenantSpec(name=tenant))
    agent = store.agents.register(AgentSpec(name=f"cli-{uuid.uuid4().hex[:8]}", model="llama-3.1-8b"))
    key = store.keys.create(Role.agent, tenant, name="cli agent").key
    done = await berth(
        "submit", agent.name, "--input", "Summarise.", "--budget", "500", "--api", api_url, "--api-key", key
    )
    assert done.returncode == 0, done.stderr
    task = store.tasks.get(done.stdout.strip())
    assert task is not None and task.state.tenant == tenant
    # Naming another tenant is still the caller's choice to make, and still refused by name.
    other = await berth(
        "submit",
        agent.name,
        "--input",
        "Summarise.",
        "--budget",
        "500",
        "--tenant",
        "default",
        "--api",
        api_url,
        "--api-key",
        key,
    )
    assert other.returncode == 2 and other.stderr.strip().splitlines()[-1].startswith("error: tenant:"), other.stderr


async def test_berth_refuses_a_cancel_reason_the_api_would_refuse_before_sending_it(
    api_url: str, store: Store, admin_key: str
) -> None:
    task_id = f"t-{uuid.uuid4().hex[:8]}"
    refused = await berth(
        "tasks", "cancel", task_id, "--reason", "x" * (MAX_REASON_CHARS + 1), "--api", api_url, "--api-key", admin_key
    )
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1].startswith(f"error: reason: a reason of 1 to {MAX_REASON_CHARS}")
    assert [e for e in store.audit.list(limit=50) if task_id in e.path] == []  # nothing was sent
