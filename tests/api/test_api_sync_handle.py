"""The blocking handle drives an own loop as the async one does, on the real app and worker: its `openai_base_url`
takes the loop's model calls, its tool results are kept and read back, and `finish` ends the task. A tenant's
key names the task by the id it chose throughout, the loop's routes included."""

from __future__ import annotations

import asyncio

import httpx
from api_helpers import Stack, unique

from sdk import AgentSpec, SyncClient, TaskStatus
from sdk.wire.identity import Role, TenantSpec

LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup",
        "parameters": {"type": "object", "properties": {"subject": {"type": "string"}}, "required": ["subject"]},
    },
}


async def test_a_sync_handle_runs_an_own_loop_by_the_id_its_tenant_chose(stack: Stack) -> None:
    spec = await stack.client.register(AgentSpec(name=unique("own"), model="llama-3.2-1b", loop="own"))
    stack.store.tenants.create(TenantSpec(name="acme"))
    key = stack.store.keys.create(Role.operator, "acme", name="sync tests").key
    chosen = unique("survey")
    client = SyncClient("http://berth", key, transport=httpx.ASGITransport(stack.app))
    try:
        submitted = await asyncio.to_thread(client.submit, spec.name, "H100 bandwidth", 20_000, chosen)
        assert submitted.task_id == f"acme:{chosen}"
        task = client.task(chosen)
        assert task.openai_base_url == f"http://berth/v1/tasks/{chosen}"

        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(stack.app), headers={"authorization": f"Bearer {key}"}
        ) as loop:
            reply = await loop.post(
                f"{task.openai_base_url}/chat/completions",
                json={"messages": [{"role": "user", "content": "H100 bandwidth"}], "tools": [LOOKUP]},
            )
        assert reply.status_code == 200, reply.text
        call_id = reply.json()["choices"][0]["message"]["tool_calls"][0]["id"]

        assert await asyncio.to_thread(task.kept_tool_result, call_id) is None
        await asyncio.to_thread(task.keep_tool_result, call_id, "3.35 TB/s")
        assert await asyncio.to_thread(task.kept_tool_result, call_id) == "3.35 TB/s"
        state = await asyncio.to_thread(task.finish, "H100: 3.35 TB/s")
        assert state.task_id == f"acme:{chosen}"
        assert state.status == TaskStatus.completed and state.result == "H100: 3.35 TB/s"
    finally:
        await asyncio.to_thread(client.close)
