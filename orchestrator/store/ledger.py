"""The token ledger: what every LLM call of a task really cost, written once per attempt.

A Temporal activity may run twice (a retry after the worker died between the write and
the reply), so each row is keyed (task, step, attempt, kind) under a unique constraint: a
second write of the same key is skipped by the database, not by a read-then-write check
that two processes could both pass.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy import Engine, bindparam, func
from sqlalchemy.engine import Row
from sqlmodel import Session, col, select

from sdk.wire.ledger import KEPT, LOST, LedgerEntry

from .connections import connected, inserts_skipping_taken
from .tables import LedgerRow, TaskRow, table_of, utcnow

# Stay well under SQLite's bound-parameter limit (32766 since 3.32, 999 before).
_IN_CHUNK = 500


@dataclass(frozen=True)
class LedgerTotals:
    """A task's spend. Prompt and completion count answered calls; lost and kept, attempts that died."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    lost_tokens: int = 0  # completion tokens of "lost" rows: generated, paid for, never delivered
    kept_tokens: int = 0  # of "kept" rows: generated before an interruption, continued from on another node
    cost_usd: float = 0.0

    @property
    def tokens(self) -> int:
        """Everything charged against the budget, as LlmStepResult.tokens_charged counts it."""
        return self.prompt_tokens + self.completion_tokens + self.lost_tokens + self.kept_tokens


_LEDGER = table_of(LedgerRow)
_KEY = ["task_id", "step", "attempt", "kind"]  # the unique key uq_ledger_call, what a retried write hits
# A node's every step books a call and reads its round, so both statements are built once. The insert skips a
# taken key on the unique key itself, which each database the store runs on spells its own way.
_RECORD = inserts_skipping_taken(_LEDGER, _KEY, _LEDGER.c.id)
_ROUND = (
    sa.select(_LEDGER)
    .where(
        _LEDGER.c.task_id == bindparam("task_id"),
        _LEDGER.c.step == bindparam("step"),
        _LEDGER.c.attempt >= bindparam("from_attempt"),
    )
    .order_by(_LEDGER.c.attempt, _LEDGER.c.id)
)


class SqlTokenLedger:
    """activities.step.ports.TokenLedger on the control-plane database."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def record(self, entry: LedgerEntry) -> bool:
        """Write one entry; False (and nothing changed) if its key is already recorded.

        One INSERT that skips a taken key (ON CONFLICT DO NOTHING), not one that fails and is rolled back:
        so it can be a statement of a larger transaction (a node's settle books the call and announces it in
        one, orchestrator/api/steps.py), which a rollback would end."""
        with connected(self._engine) as connection:
            inserted = connection.execute(
                _RECORD[connection.dialect.name],
                {
                    "task_id": entry.task_id,
                    "step": entry.step,
                    "attempt": entry.attempt,
                    "kind": entry.kind,
                    "model": entry.model,
                    "prompt_tokens": entry.prompt_tokens,
                    "completion_tokens": entry.completion_tokens,
                    "cost_usd": entry.cost_usd,
                    "ttft_s": entry.ttft_s,
                    "duration_s": entry.duration_s,
                    "served_by": entry.served_by,
                    "response_id": entry.response_id,
                    "created_at": utcnow(),
                },
            ).first()
        return inserted is not None  # a skipped write returns no row

    def entries(self, task_id: str) -> list[LedgerEntry]:
        """A task's entries by step, then attempt, then write order."""
        with Session(self._engine) as session:
            rows = session.exec(
                select(LedgerRow)
                .where(LedgerRow.task_id == task_id)
                .order_by(col(LedgerRow.step), col(LedgerRow.attempt), col(LedgerRow.id))
            ).all()
        return [_entry(r) for r in rows]

    def round_entries(self, task_id: str, step: int, from_attempt: int) -> list[LedgerEntry]:
        """One round of a step: its rows from attempt `from_attempt` on (a step asked again after waiting for
        budget numbers its attempts on from where the last round stopped), by attempt."""
        with connected(self._engine) as connection:
            rows = connection.execute(_ROUND, {"task_id": task_id, "step": step, "from_attempt": from_attempt}).all()
        return [_entry(r) for r in rows]

    def totals(self, task_id: str) -> LedgerTotals:
        return self.totals_by_tasks([task_id])[task_id]

    def totals_by_tasks(self, task_ids: Iterable[str]) -> dict[str, LedgerTotals]:
        """Totals for each id asked for (zeros for a task with no entries), summed in the database."""
        wanted = list(dict.fromkeys(task_ids))
        by_task: dict[str, dict[str, tuple[int, int, int, float]]] = {t: {} for t in wanted}
        # SQLAlchemy's select (sqlmodel's is typed for four columns at most), run on a connection: Session.exec
        # takes sqlmodel's selects only.
        with connected(self._engine) as connection:
            for start in range(0, len(wanted), _IN_CHUNK):
                chunk = wanted[start : start + _IN_CHUNK]
                rows = connection.execute(
                    sa.select(
                        col(LedgerRow.task_id),
                        col(LedgerRow.kind),
                        func.count(),
                        func.coalesce(func.sum(LedgerRow.prompt_tokens), 0),
                        func.coalesce(func.sum(LedgerRow.completion_tokens), 0),
                        func.coalesce(func.sum(LedgerRow.cost_usd), 0.0),
                    )
                    .where(col(LedgerRow.task_id).in_(chunk))
                    .group_by(col(LedgerRow.task_id), col(LedgerRow.kind))
                ).all()
                for task_id, kind, count, prompt, completion, cost in rows:
                    by_task[task_id][kind] = (count, prompt, completion, cost)
        return {task_id: _totals(kinds) for task_id, kinds in by_task.items()}

    def tokens_per_minute(self, since: datetime, tenant: str | None = None) -> list[tuple[datetime, int]]:
        """Tokens booked in each whole minute from `since` to now (every task's, or one tenant's), oldest first.

        Summed per row time in Python rather than with a date function, which SQLite and
        PostgreSQL spell differently; an hour of a busy fleet is a few thousand rows."""
        start = since.replace(second=0, microsecond=0)
        statement = select(LedgerRow.created_at, LedgerRow.prompt_tokens + LedgerRow.completion_tokens).where(
            col(LedgerRow.created_at) >= start
        )
        if tenant is not None:
            statement = statement.join(TaskRow, col(TaskRow.task_id) == col(LedgerRow.task_id)).where(
                TaskRow.tenant == tenant
            )
        with Session(self._engine) as session:
            rows = session.exec(statement).all()
        minutes = int((utcnow() - start).total_seconds() // 60) + 1
        buckets = [0] * minutes
        for at, tokens in rows:
            index = int((at - start).total_seconds() // 60)
            if 0 <= index < minutes:
                buckets[index] += tokens
        return [(start + timedelta(minutes=i), count) for i, count in enumerate(buckets)]

    def last_served(self, served_by: Iterable[str]) -> dict[str, datetime]:
        """When each replica (`node/replica`, as calls record it) last finished a call; absent if never."""
        wanted = list(dict.fromkeys(served_by))
        found: dict[str, datetime] = {}
        with Session(self._engine) as session:
            for start in range(0, len(wanted), _IN_CHUNK):
                rows = session.exec(
                    select(LedgerRow.served_by, func.max(LedgerRow.created_at))
                    .where(col(LedgerRow.served_by).in_(wanted[start : start + _IN_CHUNK]))
                    .group_by(col(LedgerRow.served_by))
                ).all()
                found.update({who: at for who, at in rows})  # created_at is NOT NULL: each group has a latest
        return found


def _totals(by_kind: dict[str, tuple[int, int, int, float]]) -> LedgerTotals:
    """Totals from (calls, prompt, completion, cost) per row kind: lost and kept rows count completion tokens only."""
    settled = [v for kind, v in by_kind.items() if kind not in (LOST, KEPT)]
    return LedgerTotals(
        calls=sum(int(v[0]) for v in settled),
        prompt_tokens=sum(int(v[1]) for v in settled),
        completion_tokens=sum(int(v[2]) for v in settled),
        lost_tokens=int(by_kind.get(LOST, (0, 0, 0, 0.0))[2]),
        kept_tokens=int(by_kind.get(KEPT, (0, 0, 0, 0.0))[2]),
        cost_usd=float(sum(v[3] for v in by_kind.values())),
    )


def _entry(r: LedgerRow | Row) -> LedgerEntry:
    return LedgerEntry(
        task_id=r.task_id, step=r.step, attempt=r.attempt, model=r.model, prompt_tokens=r.prompt_tokens,
        completion_tokens=r.completion_tokens, cost_usd=r.cost_usd, ttft_s=r.ttft_s, duration_s=r.duration_s,
        served_by=r.served_by, kind=r.kind, response_id=r.response_id,
    )  # fmt: skip
