"""The task registry: every task's spec and latest state, for the API, the CLI and the UI.

The workflow is the source of truth while a task runs; this table is its published copy,
written on every state change so that listing tasks never has to query Temporal. Writes
arrive from several processes and may arrive late (an activity retried after the task
ended), so a final state is never replaced by a non-final one. That rule is enforced inside
the UPDATE's WHERE clause, not by a read-then-write that two writers could interleave.

Beside the state, the control plane's reconciler (orchestrator.reconcile) keeps what it finds in Temporal: that
the task's workflow is stuck (`sdk.Stuck`, in columns of its own, so that the workflow's writes and its own never
overwrite each other; read back as `TaskState.stuck`), and the final state of a workflow that ended without
writing one.
"""

from __future__ import annotations

import builtins
import json
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy import Connection, Engine, bindparam, delete, func
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from sdk import FINAL_STATUSES, Conflict, Stuck, TaskState, TaskStatus

from .connections import connected, inserts_skipping_taken
from .tables import TaskRow, table_of, utcnow

_FINAL_VALUES = sorted(s.value for s in FINAL_STATUSES)
_TASKS = table_of(TaskRow)
_UPDATE = sa.update(_TASKS).where(_TASKS.c.task_id == bindparam("of_task"))
_UPDATE_UNLESS_FINAL = _UPDATE.where(_TASKS.c.status.not_in(_FINAL_VALUES))
_INSERT = inserts_skipping_taken(_TASKS, ["task_id"], _TASKS.c.task_id)
# A task is read by id for every page and call about it, and by a node's every prepare: built once.
_GET = sa.select(_TASKS.c.state_json, _TASKS.c.stuck_json, _TASKS.c.spec_json, _TASKS.c.created_at).where(
    _TASKS.c.task_id == bindparam("task_id")
)
# "Not final" named by the statuses that are not, so that the planner finds the few unfinished rows through the
# status index (ix_tasks_status_created) however many finished ones the table holds; NOT IN would walk them all.
_NOT_FINAL = _TASKS.c.status.in_(sorted(s.value for s in TaskStatus if not s.is_final))
_STUCK_TENANTS = sa.select(_TASKS.c.tenant).where(
    _TASKS.c.stuck_since >= datetime(1970, 1, 1, tzinfo=UTC), _TASKS.c.status.not_in(_FINAL_VALUES)
)


# What the task list may be ordered by in SQL: the two timestamps with a column (and an index) of their own.
TaskOrder = Literal["created", "updated"]
_ORDER_COLUMNS: dict[str, Any] = {"created": TaskRow.created_at, "updated": TaskRow.updated_at}


class TaskConflict(Conflict):
    """A task id is taken by a task with another spec."""

    def __init__(self, task_id: str) -> None:
        super().__init__(
            f"task id {task_id!r} is already used by a task with a different spec", field="task_id", status_code=409
        )
        self.task_id = task_id


@dataclass(frozen=True)
class UnsettledTask:
    """A task that is not final, with its row's `updated_at`: where the next page of `unsettled` starts."""

    state: TaskState
    updated_at: datetime


@dataclass(frozen=True)
class TaskRecord:
    state: TaskState
    spec_json: str | None  # None for a task known only from its state (never created through `create`)
    created_at: datetime


def _same_spec(a: str | None, b: str | None) -> bool:
    """Specs are compared as JSON values, so key order or spacing is not a difference."""
    if a == b:
        return True
    if a is None or b is None:
        return False
    try:
        return _set_fields(json.loads(a)) == _set_fields(json.loads(b))
    except ValueError:
        return False


def _set_fields(spec: Any) -> Any:
    """A spec without its null fields: one stored before a field existed matches the same spec sent since."""
    return {k: v for k, v in spec.items() if v is not None} if isinstance(spec, dict) else spec


def _columns(state: TaskState) -> dict[str, Any]:
    values: dict[str, Any] = {
        "status": state.status.value,
        "tenant": state.tenant,
        "agent": state.agent,
        "model": state.model,
        "parent_task_id": state.parent_task_id,
        "updated_at": state.updated_at or utcnow(),
        # `stuck` is the reconciler's, kept in its own columns: a state read back (and so carrying it) and saved
        # again must not make it the state's.
        "state_json": state.model_dump_json(exclude={"stuck"}),
    }
    if state.status.is_final:  # an ended task is not stuck, whoever ended it
        values.update(stuck_json=None, stuck_since=None)
    return values


def _state_of(state_json: str, stuck_json: str | None) -> TaskState:
    """The stored state, with the reconciler's `stuck` while the task is not final."""
    state = TaskState.model_validate_json(state_json)
    if stuck_json is None or state.status.is_final:
        return state
    return state.model_copy(update={"stuck": Stuck.model_validate_json(stuck_json)})


class SqlTaskRegistry:
    """Tasks on the control-plane database (activities.step.ports.TaskRegistry and the API's reads)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def create(self, task_id: str, spec_json: str, state: TaskState) -> bool:
        """Record a submitted task. False if it already exists with this spec (an idempotent resubmit).

        Raises TaskConflict if the id exists with another spec.
        """
        if state.task_id != task_id:
            raise ValueError(f"state is of task {state.task_id!r}, not {task_id!r}")
        with Session(self._engine) as session:
            session.add(TaskRow(task_id=task_id, spec_json=spec_json, **_columns(state)))
            try:
                session.commit()
                return True
            except IntegrityError:
                session.rollback()
                existing = session.get(TaskRow, task_id)
                if existing is None:
                    raise
                if _same_spec(existing.spec_json, spec_json):
                    return False
                raise TaskConflict(task_id) from None

    def delete(self, task_id: str) -> bool:
        """Remove a task's row (undoes a `create` whose workflow failed to start). True if one was removed."""
        with Session(self._engine) as session:
            result = session.exec(delete(TaskRow).where(col(TaskRow.task_id) == task_id))
            session.commit()
            return bool(result.rowcount)

    def save_state(self, state: TaskState, spec_json: str | None = None) -> bool:
        """Upsert a task's latest state; a late non-final state never replaces a final one. True when this write
        ended the task: it moved the row from unfinished to final (or made it final), so the caller counts the
        end (berth_tasks_ended_total) once, however many retries or writers write the same end.

        An update, and only for a task without a row an insert that skips a row made meanwhile (then the update
        again): no statement fails, so this can be one of a larger transaction (a step's record)."""
        values = _columns(state)
        if spec_json is not None:
            values["spec_json"] = spec_json
        with connected(self._engine) as connection:
            if (ended := self._update(connection, state, values)) is not None:
                return ended
            inserted = connection.execute(
                _INSERT[connection.dialect.name], {"task_id": state.task_id, "created_at": utcnow(), **values}
            ).first()
            if inserted is not None:
                return state.status.is_final
            # the row exists after all (created concurrently, or final and so not updated)
            return bool(self._update(connection, state, values))

    def end_unsettled(self, state: TaskState) -> bool:
        """Write a final `state` over a task that is not final yet (the reconciler, for a workflow that ended in
        Temporal without writing one): a final state already written, by the workflow or anyone, stays. True if
        it was written."""
        if not state.status.is_final:
            raise ValueError(f"end_unsettled writes final states, not {state.status.value}")
        with connected(self._engine) as connection:
            written = connection.execute(_UPDATE_UNLESS_FINAL.values(**_columns(state)), {"of_task": state.task_id})
            return bool(written.rowcount)

    def mark_stuck(self, task_id: str, stuck: Stuck | None) -> bool:
        """Record that the task's workflow is stuck (the reconciler's finding), or with None that it is not any more.
        A final task is never marked. True if the row changed."""
        statement = sa.update(_TASKS).where(_TASKS.c.task_id == task_id)
        if stuck is None:
            statement = statement.where(_TASKS.c.stuck_json.is_not(None)).values(stuck_json=None, stuck_since=None)
        else:
            statement = statement.where(_NOT_FINAL).values(stuck_json=stuck.model_dump_json(), stuck_since=stuck.since)
        with connected(self._engine) as connection:
            return bool(connection.execute(statement).rowcount)

    def count_stuck(self) -> dict[str, int]:
        """How many tasks of each tenant are stuck now: the few rows the index on `stuck_since` holds, however large
        the table (a range on it, counted here: with IS NOT NULL or a GROUP BY, SQLite's planner scans the table)."""
        with connected(self._engine) as connection:
            tenants = connection.execute(_STUCK_TENANTS).scalars().all()
        return dict(Counter(tenants))

    def unsettled(self, *, after: tuple[datetime, str] | None = None, limit: int = 100) -> builtins.list[UnsettledTask]:
        """At most `limit` tasks that are not final, least recently updated first, of every tenant; from just after
        `after`, the (updated_at, task_id) of the last one an earlier call returned.

        A caller that pages through them, and starts again from the first when a page comes back short, visits
        every unsettled task once a round: a task's `updated_at` only grows, so one updated meanwhile moves ahead
        of the page, never behind it."""
        if limit < 0:
            raise ValueError(f"limit must not be negative, not {limit}")
        statement = sa.select(_TASKS.c.state_json, _TASKS.c.stuck_json, _TASKS.c.updated_at).where(_NOT_FINAL)
        if after is not None:
            at, task_id = after
            statement = statement.where(
                sa.or_(
                    _TASKS.c.updated_at > at,
                    sa.and_(_TASKS.c.updated_at == at, _TASKS.c.task_id > task_id),
                )
            )
        statement = statement.order_by(_TASKS.c.updated_at.asc(), _TASKS.c.task_id.asc()).limit(limit)
        with connected(self._engine) as connection:
            rows = connection.execute(statement).all()
        return [UnsettledTask(_state_of(r.state_json, r.stuck_json), r.updated_at) for r in rows]

    def count_by_status(self, tenant: str | None = None) -> dict[str, int]:
        """How many tasks are in each status (of one tenant, or all)."""
        statement = select(TaskRow.status, func.count()).group_by(TaskRow.status)
        if tenant is not None:
            statement = statement.where(TaskRow.tenant == tenant)
        with Session(self._engine) as session:
            return {status: count for status, count in session.exec(statement).all()}

    @staticmethod
    def _update(connection: Connection, state: TaskState, values: dict[str, Any]) -> bool | None:
        """Update the row: None when there is none to update, else whether this update ended the task.

        A final state goes first over an unfinished row only, in the UPDATE's WHERE clause: of two writers of the
        same end, one updates the row and the other finds it final already (the database orders them), and only
        the first is told it ended the task. Then, as ever, a final state replaces a final one."""
        of_task = {"of_task": state.task_id}
        if connection.execute(_UPDATE_UNLESS_FINAL.values(**values), of_task).rowcount:
            return state.status.is_final
        if state.status.is_final and connection.execute(_UPDATE.values(**values), of_task).rowcount:
            return False
        return None

    def get(self, task_id: str) -> TaskRecord | None:
        with connected(self._engine) as connection:
            row = connection.execute(_GET, {"task_id": task_id}).first()
        if row is None:
            return None
        return TaskRecord(
            state=_state_of(row.state_json, row.stuck_json), spec_json=row.spec_json, created_at=row.created_at
        )

    def list(
        self,
        *,
        tenant: str | None = None,
        status: str | None = None,
        agent: str | None = None,
        parent_task_id: str | None = None,
        model: str | None = None,
        id_prefix: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        order_by: TaskOrder = "created",
        ascending: bool = False,
        limit: int = 100,
        offset: int = 0,
    ) -> builtins.list[TaskState]:
        """Tasks matching every filter given, newest first by creation unless told otherwise (creation, so pages do
        not shift as tasks run; `order_by="updated"` for the most recently changed, each on its own index).

        `created_after` is inclusive and `created_before` exclusive, so adjacent windows never count a task twice.
        """
        if limit < 0 or offset < 0:
            raise ValueError(f"limit and offset must not be negative (limit={limit}, offset={offset})")
        if order_by not in _ORDER_COLUMNS:
            raise ValueError(f"order_by must be one of {', '.join(_ORDER_COLUMNS)}, not {order_by!r}")
        statement = select(TaskRow.state_json, TaskRow.stuck_json)
        if tenant is not None:
            statement = statement.where(TaskRow.tenant == tenant)
        if status is not None:
            statement = statement.where(TaskRow.status == getattr(status, "value", status))
        if agent is not None:
            statement = statement.where(TaskRow.agent == agent)
        if parent_task_id is not None:
            statement = statement.where(TaskRow.parent_task_id == parent_task_id)
        if model is not None:
            statement = statement.where(TaskRow.model == model)
        if id_prefix:
            # startswith escapes LIKE's wildcards: a search for "a_b" finds "a_b…" only.
            statement = statement.where(col(TaskRow.task_id).startswith(id_prefix, autoescape=True))
        if created_after is not None:
            statement = statement.where(col(TaskRow.created_at) >= created_after)
        if created_before is not None:
            statement = statement.where(col(TaskRow.created_at) < created_before)
        column = col(_ORDER_COLUMNS[order_by])
        tie = col(TaskRow.task_id)  # rows made in the same instant still come in one fixed order
        statement = statement.order_by(*((column.asc(), tie.asc()) if ascending else (column.desc(), tie.desc())))
        with Session(self._engine) as session:
            rows = session.exec(statement.limit(limit).offset(offset)).all()
        return [_state_of(state_json, stuck_json) for state_json, stuck_json in rows]
