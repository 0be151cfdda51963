"""The reconciler: every few seconds, compare the tasks the store calls unfinished with their workflows in
Temporal, and make the store say what Temporal says.

It runs in the control plane's API process (`berth server`), not in the orchestrator worker:

- the API process already holds both halves it compares, the store and a Temporal client (the gateway it starts
  and steers workflows with), and already runs its other periodic work there (the UI's fleet history, the
  heartbeat listener);
- the worker is the process whose workflow code is what fails: a worker deployed with code that no longer
  replays its histories is the commonest way a task gets stuck, and a watcher inside it would share its fate
  (and, with no fleet, the worker has no periodic loop at all);
- the gauge of stuck tasks and its alert are read from the API's /metrics, beside the other task gauges.

With several control-plane replicas, one sweeps at a time: the one holding the store's "reconciler" leadership
(as one scaler runs at a time), so the counters count each failure once.

Each round is bounded: at most `batch` tasks, least recently updated first, continuing the next round where this
one stopped and starting over after the newest, so every unfinished task of every tenant is compared once per
(unfinished tasks / batch) rounds however large the store, and a round is at most `batch` describes (a few
concurrently) plus a page of history for each task that is stuck or ended. Nothing it learns leaves the store:
the task's state carries it to the API, the CLI, the UI and MCP, each of which shows a caller only its own tenant's
tasks, as for any other field.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from temporalio.client import Client, RPCTimeoutOrCancelledError
from temporalio.service import RPCError

from activities.step.task_metrics import record_task_ended
from sdk import TaskState
from sdk.wire.task_events import (
    StateChange,
    StateChangeEvent,
    WorkflowTaskFailingEvent,
    WorkflowTaskRecovered,
    WorkflowTaskRecoveredEvent,
)

from ..store import Store
from .metrics import record_ended, record_failures
from .temporal_reading import read_workflow
from .verdict import Action, End, Leave, MarkStuck, Unstick, verdict

log = logging.getLogger("berth.reconcile")

RECONCILER_JOB = "reconciler"
# A leader silent for this many rounds is taken over by another replica.
ROUNDS_PER_TERM = 3
# Describes in flight at once: a round of 100 takes a few round trips' time, and Temporal sees a trickle.
CONCURRENCY = 8
RPC_TIMEOUT = timedelta(seconds=5)
# The events it writes into a task's log, beside the workflow's own.
FAILING_EVENT = WorkflowTaskFailingEvent.KIND
RECOVERED_EVENT = WorkflowTaskRecoveredEvent.KIND

TemporalClient = Callable[[], Awaitable[Client]]


@dataclass
class Round:
    """What one round did, by task id (for the logs and the tests)."""

    compared: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)  # marked stuck, or the count of failures brought up to date
    recovered: list[str] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)
    unanswered: list[str] = field(default_factory=list)  # Temporal did not answer for them: next time
    lapped: bool = False  # the round reached the newest unfinished task: the next one starts again from the oldest


class Reconciler:
    def __init__(
        self, store: Store, temporal: TemporalClient, *, holder: str, every_s: float = 5.0, batch: int = 100
    ) -> None:
        if batch < 1 or every_s <= 0:
            raise ValueError(
                f"a round needs a batch of 1 or more and a period over 0 (batch={batch}, every_s={every_s})"
            )
        self.store = store
        self.temporal = temporal
        self.holder = holder
        self.every_s = every_s
        self.batch = batch
        self._after: tuple[datetime, str] | None = None  # where the next round starts
        self._unreachable = False

    async def run(self) -> None:
        """A round every `every_s` while this replica leads, until cancelled; a failed round is logged and the
        next one tried."""
        while True:
            try:
                if await self.round() is not None and self._unreachable:
                    log.info("Temporal answers again: reconciling tasks")
                    self._unreachable = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not self._unreachable:  # one line per outage, not one per round
                    log.warning(
                        "reconciling tasks with Temporal failed (tried again every %g s): %s", self.every_s, exc
                    )
                self._unreachable = True
            await asyncio.sleep(self.every_s)

    async def round(self) -> Round | None:
        """A round, when this replica leads the reconciler (taking the lead if no one holds it); None when another
        replica does."""
        term_s = ROUNDS_PER_TERM * self.every_s
        if not await asyncio.to_thread(self.store.leadership.hold, RECONCILER_JOB, self.holder, term_s):
            return None
        return await self.sweep()

    async def sweep(self) -> Round:
        """One round over the next `batch` unfinished tasks."""
        page = await asyncio.to_thread(self.store.tasks.unsettled, after=self._after, limit=self.batch)
        done = Round(lapped=len(page) < self.batch)
        if not page:
            self._after = None
            return done
        client = await self.temporal()  # Temporal unreachable: raises before the page is passed, so it comes again
        self._after = None if done.lapped else (page[-1].updated_at, page[-1].state.task_id)
        slots = asyncio.Semaphore(CONCURRENCY)

        async def one(state: TaskState) -> None:
            async with slots:
                try:
                    await self._reconcile(client, state, done)
                except Exception:  # one task's trouble (a write refused, say) must not stop the others' round
                    log.exception("reconciling task %s failed", state.task_id)
                    done.unanswered.append(state.task_id)

        await asyncio.gather(*(one(task.state) for task in page))
        return done

    async def _reconcile(self, client: Client, state: TaskState, done: Round) -> None:
        task_id = state.task_id
        try:
            finding = await read_workflow(client, task_id, RPC_TIMEOUT)
        except (RPCError, RPCTimeoutOrCancelledError) as exc:
            log.debug("Temporal did not say how task %s's workflow is: %s", task_id, exc)
            done.unanswered.append(task_id)
            return
        done.compared.append(task_id)
        action = verdict(state, finding, datetime.now(UTC))
        if not isinstance(action, Leave) and await asyncio.to_thread(self._carry_out, state, action):
            {MarkStuck: done.stuck, Unstick: done.recovered, End: done.ended}[type(action)].append(task_id)

    def _carry_out(self, state: TaskState, action: Action) -> bool:
        """Write the verdict with the event it means for the task's log, in one transaction; False when the row
        changed meanwhile so that it no longer applies (the task ended, say)."""
        task_id = state.task_id
        with self.store.transaction() as books:
            match action:
                case MarkStuck(stuck=stuck, began=began):
                    if not books.tasks.mark_stuck(task_id, stuck):
                        return False
                    if began:
                        books.events.append(task_id, FAILING_EVENT, stuck.model_dump(mode="json"))
                        log.warning("task %s is stuck: %s", task_id, stuck.describe())
                case Unstick(was=was):
                    if not books.tasks.mark_stuck(task_id, None):
                        return False
                    recovered = WorkflowTaskRecovered(failures=was.failures, since=was.since)
                    books.events.append(task_id, RECOVERED_EVENT, recovered.model_dump(mode="json"))
                    log.info("task %s is no longer stuck (its workflow task failed %d times)", task_id, was.failures)
                case End(state=final, how=how):
                    if not books.tasks.end_unsettled(final):
                        return False
                    books.events.append(task_id, StateChangeEvent.KIND, _ended_event(final, how))
                    log.warning("task %s's workflow ended in Temporal (%s): %s", task_id, how, final.error)
                    # Its workflow will never release what its step held: the pool drops them at its next sync.
                    for lease in books.leases.release_task(task_id):
                        log.warning(
                            "task %s ended holding lease %s on %s: released", task_id, lease.lease_id, lease.node_id
                        )
                case _:
                    return False
        # Counted once written: a verdict another writer overtook counts nothing.
        if isinstance(action, MarkStuck):
            record_failures(action.stuck.cause or "unknown", action.failures_seen)
        elif isinstance(action, End):
            record_ended(action.how)
            record_task_ended(action.state)  # end_unsettled wrote it over an unfinished row: this is its one end
        return True


def _ended_event(state: TaskState, how: str) -> dict:
    """The `state` event of the end, as the workflow's own final one reads (so streams and followers end on it)."""
    ended = StateChange(
        status=state.status,
        step=state.step,
        tokens_used=state.spend.tokens_used,
        token_limit=state.spend.token_limit,
        waiting_for=None,
        result=state.result,
        error=state.error,
        ended_in_temporal=how,
    )
    return ended.model_dump(mode="json", exclude_unset=True)  # the fields given: the stored row keeps its shape
