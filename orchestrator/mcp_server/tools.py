"""The tools: what an MCP client (a person's assistant, an IDE agent, an agent inside Berth) may do with tasks.

Each tool is one /v1 call (two where the answer needs the task's state) through the caller's
Client. Inputs are typed and bounded here so that a model gets a refusal naming the
argument before anything is sent (a budget of 0 is refused as `budget_tokens`, not as
`budget.tokens`); everything else (unknown agent, another tenant's task, a task that has
ended) is the API's refusal, passed on word for word by `Caller`.
"""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from sdk import Budget, Spend, TaskState, TaskStatus
from sdk.wire.lease import ServiceClass
from sdk.wire.limits import (
    MAX_INPUT_CHARS,
    MAX_MODEL_NAME_CHARS,
    MAX_PAGE,
    MAX_REASON_CHARS,
    MAX_STEPS,
    MAX_STORED_INT,
    MAX_TOKEN_BUDGET,
    MAX_USD_BUDGET,
    NAME_PATTERN,
    NOT_A_BOOLEAN,
    TASK_ID_PATTERN,
    TASK_REF_PATTERN,
)
from sdk.wire.objectives import LatencyObjectives

from .caller import Caller
from .results import AgentList, FleetStatus, ModelList, TaskList, WaitOutcome
from .waiting import wait_for

# Naming a task takes any id the server gives (a sub-agent's, a tenant's scoped one); choosing one, the client's form.
TaskId = Annotated[str, Field(pattern=TASK_REF_PATTERN, description="the task's id, e.g. from submit_task")]
Tokens = Annotated[
    int, Field(gt=0, le=MAX_TOKEN_BUDGET, description="tokens, prompt and completion together"), NOT_A_BOOLEAN
]
Usd = Annotated[float | None, Field(gt=0, le=MAX_USD_BUDGET, description="a spend limit in US dollars"), NOT_A_BOOLEAN]
AgentName = Annotated[str, Field(pattern=NAME_PATTERN, description="a registered agent's name (see list_agents)")]
MAX_WAIT_S = 3600.0


def register_tools(server: MCPServer, caller: Caller) -> None:
    """Add every Berth tool to `server`; each acts as `caller`."""

    @server.tool()
    async def submit_task(
        agent: AgentName,
        input: Annotated[str, Field(min_length=1, max_length=MAX_INPUT_CHARS, description="what the agent is to do")],
        budget_tokens: Tokens,
        budget_usd: Usd = None,
        priority: Annotated[
            int, Field(ge=0, le=9, description="higher is served first when GPUs are short"), NOT_A_BOOLEAN
        ] = 0,
        task_id: Annotated[
            str | None,
            Field(
                pattern=TASK_ID_PATTERN,
                description="your own id, scoped to your tenant (the task's id is"
                " <tenant>:<task_id>); resubmitting it with the same"
                " spec returns the same task",
            ),
        ] = None,
        service_class: Annotated[
            ServiceClass,
            Field(
                description="interactive (calls judged by time to first token and per token), batch (by a"
                " deadline) or low_priority (spare GPUs only)"
            ),
        ] = "interactive",
        objectives: Annotated[
            LatencyObjectives | None,
            Field(description="latency objectives over the agent's, the tenant's and the class's, field by field"),
        ] = None,
    ) -> TaskState:
        """Start an agent on a task with a hard budget; returns at once with the task's state.

        With a task token (a task running inside Berth), the new task is that task's sub-agent and its
        budget is carved out of the caller's remainder; asking for more than remains is refused."""
        async with caller.client(ToolError) as client:
            task = await client.submit(
                agent,
                input,
                Budget(tokens=budget_tokens, usd=budget_usd),
                task_id=task_id,
                priority=priority,
                service_class=service_class,
                objectives=objectives,
            )
            return await task.status()

    @server.tool()
    async def get_task(task_id: TaskId) -> TaskState:
        """A task's current state: status, step, tokens used against its limit, result or error; `stuck`, with
        Temporal's error, while its workflow cannot run (its status is then only where it stopped)."""
        async with caller.client(ToolError) as client:
            return await client.task(task_id).status()

    @server.tool()
    async def list_tasks(
        status: Annotated[TaskStatus | None, Field(description="only tasks in this status")] = None,
        agent: Annotated[str | None, Field(description="only tasks of this agent")] = None,
        limit: Annotated[int, Field(ge=1, le=MAX_PAGE), NOT_A_BOOLEAN] = 20,
    ) -> TaskList:
        """Your tasks (your tenant's, for a key confined to one), newest first."""
        async with caller.client(ToolError) as client:
            return TaskList(tasks=await client.tasks(status=status, agent=agent, limit=limit))

    @server.tool()
    async def wait_for_task(
        task_id: TaskId,
        ctx: Context,
        timeout_s: Annotated[
            float, Field(gt=0, le=MAX_WAIT_S, description="give up waiting after this long"), NOT_A_BOOLEAN
        ] = 60.0,
    ) -> WaitOutcome:
        """Wait until the task ends, reporting progress (step of max steps, tokens used) as it goes.

        Returns the final state, or the current state with timed_out=true if it is still running."""
        async with caller.client(ToolError) as client:
            return await wait_for(client.task(task_id), timeout_s, ctx.report_progress)

    @server.tool()
    async def cancel_task(
        task_id: TaskId,
        reason: Annotated[str, Field(min_length=1, max_length=MAX_REASON_CHARS)] = "cancelled through MCP",
    ) -> TaskState:
        """Ask a task to stop; it ends `cancelled` once its current step is settled."""
        async with caller.client(ToolError) as client:
            return await client.task(task_id).cancel(reason)

    @server.tool()
    async def raise_budget(
        task_id: TaskId,
        tokens: Annotated[int, Field(ge=0, le=MAX_TOKEN_BUDGET, description="tokens to add"), NOT_A_BOOLEAN] = 0,
        usd: Usd = None,
    ) -> Spend:
        """Add tokens and/or dollars to a task's budget (at least one of them); a task in awaiting_budget resumes."""
        async with caller.client(ToolError) as client:
            return await client.task(task_id).raise_budget(tokens, usd or 0.0)

    @server.tool()
    async def answer_task(
        task_id: TaskId,
        text: Annotated[str, Field(min_length=1, max_length=MAX_INPUT_CHARS, description="the answer")],
    ) -> TaskState:
        """Answer the question of a task in awaiting_input (its `question` field); it carries on."""
        async with caller.client(ToolError) as client:
            return await client.task(task_id).answer(text)

    @server.tool()
    async def approve_tool_call(
        task_id: TaskId,
        call_id: Annotated[
            str | None,
            Field(min_length=1, max_length=256, description="one call of the task's `approvals`; all if unset"),
        ] = None,
    ) -> TaskState:
        """Approve a tool call that a task's own loop waits on (its `approvals`, named in its `question`): the tool
        runs and the task carries on."""
        async with caller.client(ToolError) as client:
            return await client.task(task_id).approve(call_id)

    @server.tool()
    async def reject_tool_call(
        task_id: TaskId,
        reason: Annotated[
            str | None, Field(max_length=MAX_REASON_CHARS, description="what the model is told instead of the output")
        ] = None,
        call_id: Annotated[
            str | None,
            Field(min_length=1, max_length=256, description="one call of the task's `approvals`; all if unset"),
        ] = None,
    ) -> TaskState:
        """Reject a tool call that a task's own loop waits on: the tool does not run, and the model is told it was
        not approved (and why, with a `reason`)."""
        async with caller.client(ToolError) as client:
            return await client.task(task_id).reject(reason, call_id)

    @server.tool()
    async def fork_task(
        task_id: TaskId,
        checkpoint_seq: Annotated[
            int,
            Field(ge=0, le=MAX_STORED_INT, description="which checkpoint (see the task's checkpoint_seq)"),
            NOT_A_BOOLEAN,
        ],
        budget_tokens: Annotated[
            int | None,
            Field(gt=0, le=MAX_TOKEN_BUDGET, description="the fork's budget; the source's when absent"),
            NOT_A_BOOLEAN,
        ] = None,
        model: Annotated[
            str | None,
            Field(min_length=1, max_length=MAX_MODEL_NAME_CHARS, description="run the fork on another model"),
        ] = None,
        input: Annotated[
            str | None,
            Field(min_length=1, max_length=MAX_INPUT_CHARS, description="a new user message to continue with"),
        ] = None,
        max_steps: Annotated[int | None, Field(ge=1, le=MAX_STEPS), NOT_A_BOOLEAN] = None,
        new_task_id: Annotated[str | None, Field(pattern=TASK_ID_PATTERN, description="the fork's id")] = None,
    ) -> TaskState:
        """Start a new task from one of a task's checkpoints: its conversation so far, other limits if given."""
        async with caller.client(ToolError) as client:
            fork = await client.task(task_id).fork(
                checkpoint_seq, budget=budget_tokens, model=model, task_id=new_task_id, max_steps=max_steps, input=input
            )
            return await fork.status()

    @server.tool()
    async def list_agents() -> AgentList:
        """The agents that tasks can be submitted to: model, tools, step limits."""
        async with caller.client(ToolError) as client:
            return AgentList(agents=await client.agents())

    @server.tool()
    async def list_models() -> ModelList:
        """The model catalogue: sizes, GPUs they need, scaling policies."""
        async with caller.client(ToolError) as client:
            return ModelList(models=await client.models())

    @server.tool()
    async def fleet_status() -> FleetStatus:
        """The GPU nodes: status, GPUs (healthy of all) and loaded replicas, with fleet-wide counts."""
        async with caller.client(ToolError) as client:
            return FleetStatus.of(await client.nodes())
