"""AgentTaskWorkflow: one agent task, step by step, under a hard budget; the Temporal face of it.

This class is the shell only: the run's entry, and the signals, updates and queries the API, the SDK and a
parent task send, each handed to the part that owns it. The task's state is one value (task_state.py) that both of
its loops read and change: Berth's own loop (berth_loop.py: reserve and generate, then tools, checkpoint) or the
author's (own_loop.py: the model calls its process sends, as updates). What a step's outcome means and which
update is taken are pure functions (step_outcomes.py, own_loop_rules.py, task_checks.py); what they lead to in
Temporal, the same for both loops, is task_actions.py's. The conversation itself never enters Temporal history:
it lives in the checkpoint store and the state keeps the checkpoint's id and hash, so history stays small and
continue-as-new restarts from an id.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    import jsonschema  # noqa: F401  (passed through once: an output schema's checks import it lazily)

    from sdk import Spend, TaskState
    from sdk.wire.builtins import SpawnAgentArgs
    from sdk.wire.contracts import (
        ANSWER_UPDATE,
        CANCEL_SIGNAL,
        GRANT_BUDGET_SIGNAL,
        NODE_GONE_SIGNAL,
        RAISE_BUDGET_UPDATE,
        RAISE_CHILD_BUDGET_UPDATE,
        RECORD_STATE_ACTIVITY,
        SIMULATE_PREEMPTION_SIGNAL,
        SPAWN_UPDATE,
        STATE_QUERY,
        WORKFLOW_NAME,
        CancelRequest,
        HumanAnswer,
        NodeGone,
        RaiseBudget,
        RaiseChildBudget,
        RecordStateInput,
        SpawnedChild,
    )
    from sdk.wire.loop_approvals import (
        LOOP_APPROVALS_QUERY,
        LOOP_ASK_APPROVAL_UPDATE,
        LOOP_DECIDE_UPDATE,
        ApprovalDecision,
        ApprovalRequest,
        LoopApprovals,
    )
    from sdk.wire.own_loop import (
        LOOP_ASKED_QUERY,
        LOOP_CALL_UPDATE,
        LOOP_FINISH_UPDATE,
        LOOP_TOOL_RESULT_QUERY,
        LOOP_TOOL_RESULT_UPDATE,
        LOOP_TRANSCRIPT_QUERY,
        LoopCall,
        LoopFinish,
        LoopReply,
        LoopToolResult,
        LoopTranscript,
    )
    from sdk.wire.task_events import KIND_OF, WorkflowEventData
    from sdk.wire.task_run import TaskRun

    from . import task_checks
    from .berth_loop import MAX_TOOL_CALLS_PER_STEP, BerthLoop
    from .options import BOOKKEEPING_RETRY, BOOKKEEPING_TIMEOUT
    from .own_loop import OwnLoop
    from .task_actions import TaskActions

__all__ = ["MAX_TOOL_CALLS_PER_STEP", "AgentTaskWorkflow"]


@workflow.defn(name=WORKFLOW_NAME)
class AgentTaskWorkflow:
    @workflow.init
    def __init__(self, run: TaskRun) -> None:
        self.task = TaskActions(run, self._record_event)
        self.state = self.task.state  # the one value every phase reads and changes, whole for the queries
        # An agent whose loop is the author's own: its model calls arrive as updates, one at a time.
        self.own_loop = OwnLoop(self.task) if self.state.own_loop is not None else None

    @workflow.run
    async def run(self, run: TaskRun) -> TaskState:
        await self.task.begin(run)
        if self.own_loop is not None:
            return await self.own_loop.serve()
        return await BerthLoop(self.task).run()

    async def _record_event(self, data: WorkflowEventData) -> None:
        """The task's one event writer: an event in its log, beside its state (one local activity). The fields
        given are stored, under the kind of their model (sdk/wire/task_events.py)."""
        details = data.model_dump(mode="json", exclude_unset=True)
        await workflow.execute_local_activity(
            RECORD_STATE_ACTIVITY,
            RecordStateInput(state=self.task.snapshot(), event=KIND_OF[type(data)], details=details),
            start_to_close_timeout=BOOKKEEPING_TIMEOUT,
            retry_policy=BOOKKEEPING_RETRY,
        )

    # ----- the task's budget, its sub-agents, a person's answer, its end ---------------------------------------------
    @workflow.query(name=STATE_QUERY)
    def state_query(self) -> TaskState:
        return self.task.snapshot()

    @workflow.update(name=RAISE_BUDGET_UPDATE)
    def raise_budget(self, req: RaiseBudget) -> Spend:
        self.state.budget.raise_limit(req.tokens, req.usd)
        self.state.budget_raised = True
        return self.state.budget.spend()

    @raise_budget.validator
    def _check_raise(self, req: RaiseBudget) -> None:
        task_checks.check_raise(self.task.run, self.state, req)

    @workflow.update(name=RAISE_CHILD_BUDGET_UPDATE)
    async def raise_child_budget(self, req: RaiseChildBudget) -> SpawnedChild:
        """Grow a running sub-agent's budget out of this task's remainder (the tree is one account)."""
        return await self.task.sub_agents.raise_child(req)

    @raise_child_budget.validator
    def _check_raise_child(self, req: RaiseChildBudget) -> None:
        task_checks.check_raise_child(self.state, req)
        self.task.sub_agents.check_raise(req)

    @workflow.signal(name=GRANT_BUDGET_SIGNAL)
    def grant_budget(self, req: RaiseBudget) -> None:
        """Budget the parent carved for this sub-agent out of its own remainder (only the parent sends it)."""
        self.state.budget.raise_limit(req.tokens, req.usd)
        self.state.budget_raised = True

    @workflow.update(name=ANSWER_UPDATE)
    def answer(self, req: HumanAnswer) -> None:
        self.state.answer_text = req.text

    @answer.validator
    def _check_answer(self, req: HumanAnswer) -> None:
        task_checks.check_answer(self.state, req)

    @workflow.update(name=SPAWN_UPDATE)
    async def spawn(self, req: SpawnAgentArgs) -> SpawnedChild:
        """Start a sub-agent on behalf of a client (SDK, API, MCP), paid from this task's budget."""
        return await self.task.sub_agents.spawn(req)

    @spawn.validator
    def _check_spawn(self, req: SpawnAgentArgs) -> None:
        task_checks.check_spawn(self.task.run, self.state, req)

    @workflow.signal(name=SIMULATE_PREEMPTION_SIGNAL)
    def simulate_preemption(self) -> None:
        """For authors testing their tools: the step's generation is cut off and resumes on another node."""
        self.task.fleet.preempt_requested = True

    @workflow.signal(name=NODE_GONE_SIGNAL)
    def node_gone(self, gone: NodeGone) -> None:
        """A node was revoked or removed: a step loading or generating there moves, and none goes there again."""
        self.task.fleet.node_gone(gone.node_id)

    @workflow.signal(name=CANCEL_SIGNAL)
    async def cancel(self, req: CancelRequest) -> None:
        """Stop: a running generation is cut, tool waits end, and running sub-agents are cancelled at once."""
        await self.task.cancel(req.reason or "cancelled")

    # ----- an own loop's calls (the author's, calling the model through Berth) -----------------------------------
    @workflow.update(name=LOOP_CALL_UPDATE)
    async def loop_call(self, call: LoopCall) -> LoopReply:
        """One model call of the task's own loop, run as a step of this task (reserved, placed, booked)."""
        return await self._own_loop().call(call)

    @loop_call.validator
    def _check_loop_call(self, call: LoopCall) -> None:
        task_checks.check_own_loop_open(self.task.run, self.state)

    @workflow.update(name=LOOP_TOOL_RESULT_UPDATE)
    def loop_tool_result(self, result: LoopToolResult) -> None:
        """Keep a tool's result, so that the loop re-run after a crash gets it back instead of running it again."""
        self._own_loop().tool_result(result)

    @loop_tool_result.validator
    def _check_loop_tool_result(self, result: LoopToolResult) -> None:
        task_checks.check_own_loop_open(self.task.run, self.state)

    @workflow.update(name=LOOP_FINISH_UPDATE)
    def loop_finish(self, finish: LoopFinish) -> None:
        self._own_loop().finish(finish)

    @loop_finish.validator
    def _check_loop_finish(self, finish: LoopFinish) -> None:
        task_checks.check_own_loop_open(self.task.run, self.state)

    @workflow.update(name=LOOP_ASK_APPROVAL_UPDATE)
    async def loop_ask_approval(self, request: ApprovalRequest) -> LoopApprovals:
        """The loop stopped at tool calls that need a person's word: the task waits awaiting_input for it."""
        return await self._own_loop().ask_approval(request)

    @loop_ask_approval.validator
    def _check_loop_ask_approval(self, request: ApprovalRequest) -> None:
        task_checks.check_own_loop_open(self.task.run, self.state)

    @workflow.update(name=LOOP_DECIDE_UPDATE)
    async def loop_decide(self, decision: ApprovalDecision) -> LoopApprovals:
        """A person approved or rejected a waiting call (or all of them); once none waits, the loop resumes."""
        return await self._own_loop().decide(decision)

    @loop_decide.validator
    def _check_loop_decide(self, decision: ApprovalDecision) -> None:
        task_checks.check_own_loop_open(self.task.run, self.state)
        self._own_loop().record.check_decision(decision)

    @workflow.query(name=LOOP_APPROVALS_QUERY)
    def loop_approvals(self) -> LoopApprovals | None:
        return self.state.own_loop.approvals if self.state.own_loop is not None else None

    @workflow.query(name=LOOP_TRANSCRIPT_QUERY)
    def loop_transcript(self) -> LoopTranscript | None:
        return self.own_loop.record.transcript() if self.own_loop is not None else None

    @workflow.query(name=LOOP_ASKED_QUERY)
    def loop_asked(self, conversation: str) -> list[dict[str, str]]:
        return self.own_loop.record.asked_on(conversation) if self.own_loop is not None else []

    @workflow.query(name=LOOP_TOOL_RESULT_QUERY)
    def loop_tool_result_of(self, call_id: str) -> str | None:
        return self.own_loop.record.tool_result(call_id) if self.own_loop is not None else None

    def _own_loop(self) -> OwnLoop:
        assert self.own_loop is not None  # the validator refused the update otherwise
        return self.own_loop
