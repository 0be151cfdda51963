"""Turning a TaskSpec into a running task: validate, record, start — all or nothing.

The row is written before the workflow starts, so a task is listed the moment its submit
returns and the workflow's first state save finds its row. If the start then fails, the row
is removed again (unless the start only timed out and Temporal has the workflow after all): a
client sees either a task that runs or a refusal, never a task stuck in `queued` with nothing
behind it, nor a workflow without its row. The id is the workflow id, which is what makes a resubmit
idempotent end to end (the store compares specs, Temporal keeps one run per id); an id the client
chose is its tenant's (task_ids.py), so the comparison only ever meets the tenant's own tasks.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime

from sdk import AgentSpec, ForkSource, LatencyObjectives, ModelSettings, Spend, TaskSpec, TaskState, TaskStatus
from sdk.wire.objective_layers import effective
from sdk.wire.task_run import CURRENT_WORKFLOW_VERSION, TaskRun

from ..catalogue import UnknownModel
from ..pool.feasibility import never_reason
from ..store import TaskConflict
from .errors import ApiError, conflict, invalid, unavailable
from .principal import Principal
from .services import Services
from .task_ids import scoped_task_id
from .temporal_gateway import TemporalUnavailable


async def _started_all_the_same(services: Services, task_id: str) -> bool:
    """A start that timed out may still have reached Temporal; then the task runs, and its row must stay."""
    try:
        return await services.temporal.is_started(task_id)
    except TemporalUnavailable:
        return False


@dataclass(frozen=True)
class Submitted:
    state: TaskState
    created: bool  # False: the same task was submitted before, and this is its state


async def resolve_agent(
    services: Services, name: str, version: str | None = None, visible_to: str | None = None
) -> AgentSpec:
    """The registered agent (a given version when it still exists, else the current one), if the
    caller's tenant (`visible_to`) may use it."""
    agent = None
    if version:
        agent = await services.db(services.store.agents.get, name, version, visible_to)
    if agent is None:
        agent = await services.db(services.store.agents.get, name, None, visible_to)
    if agent is None:
        raise invalid("agent", f"agent {name!r} is not registered; register it first (POST /v1/agents)")
    return agent


async def settled_settings(services: Services, model: str, agent: AgentSpec, spec: TaskSpec) -> ModelSettings | None:
    """The task's settings over its agent's, refused (naming the field) where `model`'s engine or provider
    cannot apply one: a setting silently dropped on every call would pass for one in force."""
    settings = spec.settings.over(agent.settings) if spec.settings else agent.settings
    if settings is None:
        return None
    unsupported, served_by = await asyncio.to_thread(services.catalogue.unsupported_settings, model, settings)
    if unsupported:
        asked_by = "this task" if spec.settings and unsupported[0] in spec.settings.chosen() else f"agent {agent.name}"
        raise invalid(
            f"settings.{unsupported[0]}",
            f"{model} is served by {served_by}, which does not apply {', '.join(unsupported)} (asked by {asked_by})",
        )
    return settings


async def task_objectives(services: Services, agent: AgentSpec, spec: TaskSpec) -> LatencyObjectives:
    """The task's latency objectives, resolved once here: a tenant's or an agent's later change applies to the tasks
    submitted after it, as a running task keeps the budget and agent version it started with."""
    tenant = await services.db(services.store.tenants.get, spec.tenant)
    return effective(spec.service_class, tenant.objectives if tenant else None, agent.objectives, spec.objectives)


async def check_model(services: Services, model: str) -> None:
    """Refuse a model the catalogue cannot serve, or that no node of the fleet could ever hold."""
    try:
        services.catalogue.check(model)
    except UnknownModel as exc:
        raise invalid("model", str(exc)) from None
    entry = services.catalogue.get(model)
    if services.config.fleet and entry is not None and entry.provider == "self-hosted":
        reason = never_reason(
            await services.db(services.store.fleet.list),
            entry,
            await services.db(services.store.node_admission.joining),
        )
        if reason is not None:
            raise invalid("model", reason)


def initial_state(run: TaskRun) -> TaskState:
    spec = run.spec
    return TaskState(
        task_id=run.task_id,
        agent=run.agent.name,
        agent_version=run.agent.version,
        model=run.agent.model,
        tenant=spec.tenant,
        status=TaskStatus.queued,
        step=0,
        max_steps=run.agent.max_steps,
        spend=Spend(token_limit=spec.budget.tokens, usd_limit=spec.budget.usd),
        parent_task_id=run.parent_task_id,
        objectives=run.objectives,
        updated_at=run.submitted_at,
    )


def check_submission_rate(services: Services, caller: Principal) -> None:
    """429 once the caller's key has used its burst of submissions and its rate since."""
    wait_s = services.submissions.take(caller.key_id)
    if wait_s is not None:
        raise ApiError(
            429,
            f"API key {caller.key_id} submits too fast (more than {services.submissions.burst} at"
            f" once, then {services.submissions.per_s:g}/s); retry in {wait_s:.1f} s",
            headers={"Retry-After": str(max(1, round(wait_s)))},
        )


async def submit_task(
    services: Services,
    spec: TaskSpec,
    caller: Principal,
    *,
    fork_of: ForkSource | None = None,
    agent_version: str | None = None,
) -> Submitted:
    agent = await resolve_agent(services, spec.agent, agent_version, caller.tenant)
    model = spec.model or agent.model
    await check_model(services, model)
    settings = await settled_settings(services, model, agent, spec)

    spec = spec.model_copy(update={"task_id": scoped_task_id(spec.tenant, spec.task_id)})
    task_id = spec.task_id
    assert task_id is not None
    run = TaskRun(
        task_id=task_id,
        spec=spec,
        agent=agent.model_copy(
            update={"model": model, "max_steps": spec.max_steps or agent.max_steps, "settings": settings}
        ),
        submitted_at=datetime.now(UTC),
        budget_grace_s=spec.budget_grace_s or services.config.budget_grace_s,
        heartbeat_timeout_s=services.config.heartbeat_timeout_s,
        fork_of=fork_of,
        output_format_native=agent.output_schema is not None
        and await asyncio.to_thread(services.catalogue.takes_response_format, model),
        workflow_version=CURRENT_WORKFLOW_VERSION,
        objectives=await task_objectives(services, agent, spec),
    )
    state = initial_state(run)
    try:
        created = await services.db(services.store.tasks.create, task_id, spec.model_dump_json(), state)
    except TaskConflict as exc:
        raise conflict(exc.message, field="task_id") from None

    if not created:
        record = await services.task_record(task_id, caller)
        if record.state.status == TaskStatus.queued:
            # The first submit may have died between writing the row and starting the
            # workflow; starting again is harmless (USE_EXISTING) and heals that gap.
            try:
                await services.temporal.start_task(run)
            except TemporalUnavailable as exc:
                raise unavailable(f"task {task_id} exists but its workflow could not be started: {exc}") from None
        return Submitted(record.state, created=False)

    try:
        await services.temporal.start_task(run)
    except BaseException as exc:
        if isinstance(exc, TemporalUnavailable) and await _started_all_the_same(services, task_id):
            return Submitted(state, created=True)
        await services.db(services.store.tasks.delete, task_id)
        if isinstance(exc, TemporalUnavailable):
            raise unavailable(f"task not submitted: {exc}") from None
        raise
    return Submitted(state, created=True)
