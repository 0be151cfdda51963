"""Budget delegation: what a task token does when it submits a task.

A task running inside Berth (its tools, an MCP server it runs) gets a token scoped to itself
(`POST /v1/tasks/{id}/token`). Whatever it submits with that token is its sub-agent: the
budget is carved out of its own remainder by its workflow (the spawn update), returned when
the child is done, and a request for more than remains is refused with the numbers. So a task
can never spend more through its token than it was given, however it asks.
"""

from __future__ import annotations

from sdk import AgentSpec, Budget, Spend, TaskSpec, TaskState, TaskStatus
from sdk.wire.builtins import SpawnAgentArgs
from sdk.wire.contracts import SpawnedChild

from ..store import TaskConflict
from .admission import SubmitRequest
from .errors import conflict, invalid, unavailable
from .principal import Principal
from .services import Services
from .submission import resolve_agent
from .temporal_gateway import TemporalUnavailable, UpdateRejected, WorkflowGone

# What a sub-agent takes from its parent rather than from the request.
_FROM_THE_PARENT = (
    "task_id",
    "tenant",
    "model",
    "max_steps",
    "service_class",
    "max_interruptions",
    "budget_grace_s",
    "objectives",
)


async def submit_as_child(svc: Services, caller: Principal, request: SubmitRequest) -> TaskState:
    """Start the submitted task as a sub-agent of the caller's task, paid from its budget."""
    assert caller.task_id is not None
    parent = await svc.task_record(caller.task_id, caller)
    # Left out, left at its default (as clients send it) or, for the tenant, the parent's own: nothing to refuse.
    asked = [
        name
        for name in _FROM_THE_PARENT
        if name in request.model_fields_set
        and getattr(request, name) != (parent.state.tenant if name == "tenant" else TaskSpec.model_fields[name].default)
    ]
    if asked:
        raise invalid(
            asked[0],
            f"a task token starts sub-agents of task {caller.task_id}, which take {asked[0]} from it; leave it out",
        )
    if request.budget is not None and (request.budget.usd is not None or request.budget.deadline is not None):
        field = "budget.usd" if request.budget.usd is not None else "budget.deadline"
        raise invalid(field, "a sub-agent's dollar limit and deadline are its parent's share, not asked for")
    agent = await resolve_agent(svc, request.agent, visible_to=parent.state.tenant)
    args = SpawnAgentArgs(
        agent=request.agent, input=request.input, tokens=request.budget.tokens if request.budget is not None else None
    )
    try:
        child = await svc.temporal.spawn(caller.task_id, args)
    except TemporalUnavailable as exc:
        raise unavailable(str(exc)) from None
    except (WorkflowGone, UpdateRejected) as exc:
        raise conflict(str(exc), field="budget.tokens" if str(exc).startswith("budget.tokens:") else None) from None
    return await list_child(svc, child, agent, parent.state, request.input, request.priority)


async def list_child(
    svc: Services, child: SpawnedChild, agent: AgentSpec, parent: TaskState, input_text: str, priority: int
) -> TaskState:
    """List a sub-agent its parent's workflow has just started, at once and with its input: a caller who asks
    about it next (cancel, preempt, read) finds it, though its own first save may come later. That save (which
    may also come first) keeps its row."""
    state = TaskState(
        task_id=child.task_id,
        agent=agent.name,
        agent_version=agent.version,
        model=agent.model,
        tenant=parent.tenant,
        status=TaskStatus.queued,
        max_steps=agent.max_steps,
        spend=Spend(token_limit=child.tokens, usd_limit=child.usd),
        parent_task_id=parent.task_id,
        objectives=parent.objectives,  # its workflow's, as workflows/sub_agents.py gives them
    )
    spec = TaskSpec(
        task_id=child.task_id,
        agent=agent.name,
        input=input_text,
        tenant=parent.tenant,
        budget=Budget(tokens=child.tokens, usd=child.usd),
        priority=priority,
    )
    try:
        await svc.db(svc.store.tasks.create, child.task_id, spec.model_dump_json(), state)
    except TaskConflict:
        pass
    return state
