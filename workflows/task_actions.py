"""What a task's phases do in Temporal, for both of its loops: record its state, write its checkpoint, make a
step's model call, end the task or continue it as new.

The decisions are made elsewhere, as pure functions of the state (step_outcomes.py, own_loop_rules.py); Berth's
loop (berth_loop.py) and the author's own (own_loop.py) carry them out through the one TaskActions a run holds,
which owns the run's state value (task_state.py), its event-fixed clock, its sub-agents and its fleet step.
"""

from __future__ import annotations

from datetime import timedelta
from typing import NoReturn

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from sdk import CheckpointRef, GpuTrouble, Message, TaskState, TaskStatus
    from sdk.wire.builtins import tools_offered
    from sdk.wire.contracts import (
        BEGIN_TASK_ACTIVITY,
        CHECKPOINT_ACTIVITY,
        RECORD_STATE_ACTIVITY,
        BeginTaskInput,
        BeginTaskResult,
        CheckpointInput,
        LlmStepInput,
        LlmStepResult,
        PendingStep,
        RecordStateInput,
    )
    from sdk.wire.lease import LeaseRequest
    from sdk.wire.own_loop import LoopCall
    from sdk.wire.task_events import EventWriter
    from sdk.wire.task_run import TaskRun

    from . import step_outcomes, task_state
    from .code_versions import EVENT_CLOCK
    from .event_clock import EventClock
    from .fleet_step import FleetStep, StepCut
    from .options import BOOKKEEPING_RETRY, BOOKKEEPING_TIMEOUT
    from .sub_agents import SubAgents
    from .task_state import Ending


class TaskActions:
    def __init__(self, run: TaskRun, record_event: EventWriter) -> None:
        """`record_event(data)`: the workflow's one event writer (an event beside the task's state)."""
        self.run = run
        self.agent = run.agent
        # The clock and continue-as-new hint that decisions read (code_versions.py, rule 3); set here, in the
        # run's first workflow task, and at each event-fixed moment after.
        self.clock = EventClock(event_fixed=run.workflow_version >= EVENT_CLOCK)
        carried = run.carried
        self.state = task_state.begin(run)
        self.sub_agents = SubAgents(run, self.state.budget, self.state.children)
        self.fleet = FleetStep(
            self._set_waiting_for_gpu,
            self._stop_waiting,
            lambda: self.state.cancel_reason is not None,
            record_event,
            self.clock,
            max_interruptions=run.spec.max_interruptions,
            recovery=run.spec.recovery,
            heartbeat_timeout=timedelta(seconds=run.heartbeat_timeout_s),
            interruptions=carried.interruptions if carried else 0,
            placements_step=self.state.steps_done + 1 if carried else 0,
            placements_used=carried.placements_of_next_step if carried else 0,
            workflow_version=run.workflow_version,
        )
        self.record_event = record_event

    # ----- the task as it is shown and recorded -----------------------------------------------------------------
    def snapshot(self) -> TaskState:
        return task_state.snapshot(self.run, self.state, self.fleet.interruptions, workflow.now())

    async def set_status(self, status: TaskStatus, spec_json: str | None = None) -> None:
        self.state.status = status
        await workflow.execute_local_activity(
            RECORD_STATE_ACTIVITY,
            RecordStateInput(state=self.snapshot(), spec_json=spec_json),
            start_to_close_timeout=BOOKKEEPING_TIMEOUT,
            retry_policy=BOOKKEEPING_RETRY,
        )

    async def begin(self, run: TaskRun) -> None:
        """A new task gets its first checkpoint (a resumed run has one); the task is running."""
        if self.state.checkpoint is None:
            begun = await workflow.execute_local_activity(
                BEGIN_TASK_ACTIVITY,
                BeginTaskInput(run=run),
                result_type=BeginTaskResult,
                start_to_close_timeout=BOOKKEEPING_TIMEOUT,
                retry_policy=BOOKKEEPING_RETRY,
            )
            self.state.checkpoint, self.state.steps_done = begun.checkpoint, begun.step
        await self.set_status(TaskStatus.running, spec_json=run.spec.model_dump_json())

    def step_done(self, step: int, new_messages: list[Message]) -> None:
        """The step is over: its messages wait in `pending` for the next activity to write them, with the task
        as it stands now."""
        self.state.steps_done = step
        self.state.pending = PendingStep(step=step, new_messages=new_messages, state=self.snapshot())

    async def flush_pending(self) -> None:
        """Write the last step's checkpoint when no LLM call is coming to carry it."""
        if self.state.pending is None or self.state.checkpoint is None:
            return
        self.state.checkpoint = await workflow.execute_local_activity(
            CHECKPOINT_ACTIVITY,
            CheckpointInput(task_id=self.run.task_id, parent=self.state.checkpoint, pending=self.state.pending),
            result_type=CheckpointRef,
            start_to_close_timeout=BOOKKEEPING_TIMEOUT,
            retry_policy=BOOKKEEPING_RETRY,
        )
        self.state.pending = None

    # ----- a step's model call -----------------------------------------------------------------------------------
    async def generate(self, step: int, loop_call: LoopCall | None = None) -> LlmStepResult | StepCut | None:
        """The step's model call: Berth's own, or the one an own loop sent (its tools, settings, instructions)."""
        state = self.state
        assert state.checkpoint is not None
        spec = self.run.spec
        max_tokens = self.agent.max_tokens_per_step
        if loop_call is not None:
            tools, settings = loop_call.tools, loop_call.settings
            max_tokens = min(max_tokens, loop_call.max_tokens or max_tokens)
        else:
            # A repair step only answers: its tools would give the model something else to do than fix its answer.
            tools = [] if state.repairing else [t.to_openai() for t in tools_offered(self.agent)]
            settings = step_outcomes.call_settings(self.run, tools)
        inp = LlmStepInput(
            task_id=self.run.task_id,
            step=step,
            checkpoint=state.checkpoint,
            pending=state.pending,
            model=self.agent.model,
            max_tokens=max_tokens,
            token_allowance=state.budget.token_allowance,
            usd_allowance=state.budget.usd_allowance,
            tenant=spec.tenant,
            tools=tools,
            settings=settings,
            instructions=loop_call.instructions if loop_call is not None else None,
        )
        lease = LeaseRequest(
            task_id=self.run.task_id,
            step=step,
            model=self.agent.model,
            tokens=max(1, min(max_tokens, state.budget.token_allowance)),
            tenant=spec.tenant,
            priority=spec.priority,
            service_class=spec.service_class,
            objectives=self.run.objectives,  # the activity's input only: no command changes (replay-safe)
        )
        return await self.fleet.generate(inp, lease)

    async def _set_waiting_for_gpu(self, reason: str | None, trouble: GpuTrouble | None) -> None:
        self.state.waiting_for, self.state.gpu_trouble = reason, trouble
        await self.set_status(TaskStatus.waiting_for_gpu if reason is not None else TaskStatus.running)

    def _stop_waiting(self) -> bool:
        return self.reason_to_stop() is not None

    # ----- time, and the task's end --------------------------------------------------------------------------------
    def reason_to_stop(self) -> Ending | None:
        return step_outcomes.reason_to_stop(self.state, self.run, self.sub_agents.violation, self.clock.now())

    def until_deadline(self, wait_s: float) -> timedelta:
        """A wait of `wait_s`, cut short by the task's deadline (Temporal needs a positive timeout)."""
        wait = timedelta(seconds=wait_s)
        deadline = self.run.spec.budget.deadline
        if deadline is not None:
            wait = min(wait, deadline - workflow.now())
        return max(wait, timedelta(milliseconds=1))

    async def cancel(self, reason: str) -> None:
        """Stop: a running generation is cut, tool waits end, and running sub-agents are cancelled at once (the
        tree stops together, instead of the parent waiting for its children's answers first)."""
        if self.state.cancel_reason is not None:
            return
        self.state.cancel_reason = reason
        if self.sub_agents.running:
            await self.sub_agents.cancel_all(f"parent {self.run.task_id} was cancelled")

    async def finish(self, status: TaskStatus, error: str | None = None) -> TaskState:
        state = self.state
        state.finishing = True  # no new sub-agent from here: one started after the wait below would outlive the task
        state.waiting_for, state.gpu_trouble = None, None
        await self.flush_pending()
        # A spawn still starting its child has carved the child's budget but not listed it as running yet: let it
        # finish, so that the child is cancelled or waited for below and its carve settled, never left reserved.
        await workflow.wait_condition(lambda: not self.sub_agents.starting)
        if self.sub_agents.running:
            # Sub-agents started from outside still run on this task's budget: settle them first.
            if status == TaskStatus.cancelled:
                await self.sub_agents.cancel_all(f"parent {self.run.task_id} was cancelled")
            state.waiting_for = "sub-agents to finish"
            await self.sub_agents.wait_all()
            state.waiting_for = None
        if status != TaskStatus.completed:
            state.error = error
        await self.set_status(status)
        return self.snapshot()

    async def continue_as_new(self) -> NoReturn:
        """Start the next run from the last checkpoint, once every handler has finished."""
        await workflow.wait_condition(workflow.all_handlers_finished)
        await self.flush_pending()
        workflow.continue_as_new(self.continuation())

    def continuation(self) -> TaskRun:
        """The input of the next run: the same task, resumed from its last checkpoint."""
        fleet = self.fleet
        placements = fleet.placements_used if fleet.placements_step == self.state.steps_done + 1 else 0
        return task_state.continuation(self.run, self.state, fleet.interruptions, placements)
