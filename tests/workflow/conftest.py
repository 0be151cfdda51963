"""Workflow tests: the real workflow and activities on a real dev server, a real engine process
and a real SQLite store; each test gets its own task queue and agent names."""

from __future__ import annotations

import contextlib
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client, WorkflowHandle

from orchestrator.config import BerthConfig
from orchestrator.store import Store
from orchestrator.worker import build_worker
from sdk import Agent, AgentSpec, Budget, TaskSpec, TaskState, tool, tool_context
from sdk._mcp_server import BerthAccess
from sdk._serve import mcp_toolbox, registered_spec, tool_worker
from sdk.wire.task_run import CURRENT_WORKFLOW_VERSION, TaskRun


@dataclass
class Harness:
    client: Client
    store: Store
    queue: str
    engine_url: str
    exits: contextlib.AsyncExitStack
    tool_calls: Counter = field(default_factory=Counter)
    served: dict[str, AgentSpec] = field(default_factory=dict)

    def unique(self, name: str) -> str:
        return f"{name}-{uuid.uuid4().hex[:8]}"

    def research_agent(self, name: str = "research", **kwargs: object) -> Agent:
        calls = self.tool_calls

        @tool
        def search(query: str) -> str:
            """Search the knowledge base."""
            calls[("search", tool_context().idempotency_key)] += 1
            return f"facts about {query}: bandwidth 3.35 TB/s"

        @tool
        def take_note(topic: str) -> str:
            """Record a note."""
            calls[("take_note", tool_context().idempotency_key)] += 1
            return f"noted {topic}"

        return Agent(self.unique(name), "llama-3.1-8b", "Research carefully.", [search, take_note], **kwargs)

    async def serve(self, agent: Agent, berth: BerthAccess | None = None) -> AgentSpec:
        """Run the agent's tool worker (its MCP servers reached first) and register what it serves."""
        if agent.name not in self.served:
            toolbox = await self.exits.enter_async_context(mcp_toolbox(agent, berth))
            self.served[agent.name] = registered_spec(agent, toolbox)
            await self.exits.enter_async_context(tool_worker(self.client, agent, toolbox))
        return self.store.agents.register(self.served[agent.name])

    async def start(
        self,
        agent: Agent,
        text: str,
        tokens: int,
        *,
        grace_s: float = 3600,
        usd: float | None = None,
        task_id: str | None = None,
        **run_fields: object,
    ) -> WorkflowHandle:
        await self.serve(agent)
        task_id = task_id or self.unique("t")
        spec = TaskSpec(task_id=task_id, agent=agent.name, input=text, budget=Budget(tokens, usd=usd))
        run = TaskRun(
            task_id=task_id,
            spec=spec,
            agent=self.store.agents.get(agent.name),
            submitted_at=datetime.now(UTC),
            workflow_version=CURRENT_WORKFLOW_VERSION,
            budget_grace_s=grace_s,
            **run_fields,
        )
        return await self.client.start_workflow(
            "AgentTaskWorkflow", run, id=task_id, task_queue=self.queue, result_type=TaskState
        )

    async def engine_usage(self, task_id: str) -> dict:
        async with httpx.AsyncClient() as http:
            body = (await http.get(self.engine_url.removesuffix("/v1") + "/sim/usage")).json()
        return body["by_task"].get(task_id, {})

    def duplicate_tool_calls(self) -> list:
        return [key for key, n in self.tool_calls.items() if n > 1]


@pytest.fixture
async def berth(temporal_client: Client, engine_url: str, tmp_path: Path) -> AsyncIterator[Harness]:
    config = BerthConfig(data_dir=tmp_path, engine_url=engine_url, database_url=f"sqlite:///{tmp_path}/berth.db")
    store = Store.open(config.resolved_database_url)
    queue = f"control-{uuid.uuid4().hex[:8]}"
    async with contextlib.AsyncExitStack() as exits:
        await exits.enter_async_context(build_worker(temporal_client, store, config, task_queue=queue))
        yield Harness(temporal_client, store, queue, engine_url, exits)
