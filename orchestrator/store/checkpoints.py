"""Checkpoints of a task's reasoning state, stored as a hash-chained list of deltas.

An agent's conversation only grows: step n re-sends everything of step n-1 plus a few new
messages. Storing the whole conversation at every step would cost O(n²) over a task; each
checkpoint therefore keeps only what its step appended (plus the step's small scratch and
state dicts), and a read rebuilds the conversation from seq 0 forward. Storage stays linear
in the conversation, and a step's write costs its delta, not the whole history.

Each row's hash is sha256(parent hash + canonical JSON of its delta), so a read can prove
the rebuilt conversation is the one that was written: an edited, missing or reordered row
breaks the chain and the read raises instead of feeding a model a corrupted history.

Rows are immutable once written. A retried write of the same delta (a Temporal activity
retry) returns the existing checkpoint; a different delta at an existing seq is refused,
so a task never has two checkpoints with one seq.
"""

from __future__ import annotations

import builtins
import copy
import hashlib
import json
import threading
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pydantic_core
import sqlalchemy as sa
from sqlalchemy import Connection, Engine, bindparam, func
from sqlalchemy.engine import Row
from sqlmodel import Session, col, select

from sdk import Message, NotFound
from sdk.wire.contracts import CheckpointRef
from sdk.wire.step_call import CheckpointContent

from .connections import connected, inserts_skipping_taken
from .tables import CheckpointRow, table_of

HASH_CHARS = 16  # 64 bits: the chain detects accidents and edits, it is not a signature
ROOT_PARENT_HASH = ""
# zlib costs more than it saves on a short delta (a tool call, a one-line answer).
COMPRESS_MIN_BYTES = 256
DEFAULT_CACHE_SIZE = 256

Json = dict[str, Any]


class CheckpointNotFound(NotFound, KeyError):
    """No checkpoint matches the id or (task, seq) asked for."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status_code=404)

    def __str__(self) -> str:  # KeyError would print the message quoted, like a dict key
        return self.message


class CheckpointConflict(ValueError):
    """A write contradicts what is stored: another delta at that seq, or a parent ref that is not this task's."""


class CheckpointCorrupt(ValueError):
    """A task's stored chain fails verification: a row was edited, removed or reordered."""


@dataclass(frozen=True)
class CheckpointSummary:
    """One checkpoint as the checkpoint list shows it, without its content."""

    seq: int
    step: int
    id: int
    hash: str
    created_at: datetime
    message_count: int  # the whole conversation's length at this seq
    delta_bytes: int  # what this checkpoint's delta occupies in the store


def canonical_json(value: Any) -> bytes:
    """The one byte form a delta is hashed and stored in: sorted keys, no spaces, UTF-8."""
    return json.dumps(
        value,
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
        default=pydantic_core.to_jsonable_python,  # datetimes, enums, models in scratch/state
    ).encode("utf-8")


def chain_hash(parent_hash: str, delta: bytes) -> str:
    return hashlib.sha256(parent_hash.encode("ascii") + delta).hexdigest()[:HASH_CHARS]


def _pack(raw: bytes) -> tuple[str, bytes]:
    if len(raw) >= COMPRESS_MIN_BYTES:
        packed = zlib.compress(raw, 6)
        if len(packed) < len(raw):
            return "zlib", packed
    return "json", raw


def _unpack(row: CheckpointRow | Row) -> bytes:
    if row.encoding == "json":
        return row.delta
    if row.encoding == "zlib":
        try:
            return zlib.decompress(row.delta)
        except zlib.error as exc:
            raise CheckpointCorrupt(
                f"checkpoint {row.id} (task {row.task_id!r}, seq {row.seq}) cannot be decompressed: {exc}"
            ) from exc
    raise CheckpointCorrupt(f"checkpoint {row.id} has an unknown encoding {row.encoding!r}")


def _message_dicts(messages: builtins.list[Message]) -> builtins.list[Json]:
    return [m.model_dump(mode="json", exclude_none=True) for m in messages]


@dataclass(frozen=True)
class _Conversation:
    """A verified conversation as the cache holds it. Its dicts are never handed out, only copies."""

    ref: CheckpointRef
    task_id: str
    messages: tuple[Json, ...]
    scratch: Json
    state: Json

    def content(self) -> CheckpointContent:
        return CheckpointContent(
            ref=self.ref.model_copy(),
            task_id=self.task_id,
            messages=[Message.model_validate(m) for m in self.messages],  # new objects, nothing shared
            scratch=copy.deepcopy(self.scratch),
            state=copy.deepcopy(self.state),
        )


class _ConversationCache:
    """A process-local LRU of rebuilt conversations, so the next step's read costs one delta.

    Entries sharing a task share their message dicts (a child's tuple holds its parent's
    dicts), so a task's cached checkpoints cost pointers, not copies.
    """

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[int, _Conversation] = OrderedDict()
        self._by_task: dict[str, dict[int, int]] = {}  # task -> seq -> checkpoint id
        self._lock = threading.Lock()

    def get(self, checkpoint_id: int) -> _Conversation | None:
        with self._lock:
            entry = self._entries.get(checkpoint_id)
            if entry is not None:
                self._entries.move_to_end(checkpoint_id)
            return entry

    def nearest(self, task_id: str, seq: int) -> _Conversation | None:
        """The cached checkpoint of `task_id` with the highest seq not above `seq`."""
        with self._lock:
            seqs = [s for s in self._by_task.get(task_id, {}) if s <= seq]
            if not seqs:
                return None
            checkpoint_id = self._by_task[task_id][max(seqs)]
            self._entries.move_to_end(checkpoint_id)
            return self._entries[checkpoint_id]

    def put(self, conversation: _Conversation) -> None:
        if self._capacity <= 0:
            return
        with self._lock:
            self._entries[conversation.ref.id] = conversation
            self._entries.move_to_end(conversation.ref.id)
            self._by_task.setdefault(conversation.task_id, {})[conversation.ref.seq] = conversation.ref.id
            while len(self._entries) > self._capacity:
                _, evicted = self._entries.popitem(last=False)
                self._forget_index(evicted)

    def forget_task(self, task_id: str) -> None:
        with self._lock:
            for checkpoint_id in self._by_task.pop(task_id, {}).values():
                self._entries.pop(checkpoint_id, None)

    def _forget_index(self, conversation: _Conversation) -> None:
        seqs = self._by_task.get(conversation.task_id)
        if seqs is not None and seqs.get(conversation.ref.seq) == conversation.ref.id:
            del seqs[conversation.ref.seq]
            if not seqs:
                del self._by_task[conversation.task_id]


_CHECKPOINTS = table_of(CheckpointRow)
# A read is a node's every prepare (the newest) and a resumed task's (by id); then the deltas its cache lacks.
_LATEST = (
    sa.select(_CHECKPOINTS)
    .where(_CHECKPOINTS.c.task_id == bindparam("task_id"))
    .order_by(_CHECKPOINTS.c.seq.desc())
    .limit(1)
)
_BY_ID = sa.select(_CHECKPOINTS).where(_CHECKPOINTS.c.id == bindparam("id"))
_AT_SEQ = sa.select(
    _CHECKPOINTS.c.id,
    _CHECKPOINTS.c.seq,
    _CHECKPOINTS.c.step,
    _CHECKPOINTS.c.hash,
    _CHECKPOINTS.c.parent_hash,
    _CHECKPOINTS.c.message_count,
).where(_CHECKPOINTS.c.task_id == bindparam("task_id"), _CHECKPOINTS.c.seq == bindparam("seq"))
# A write skips a taken (task, seq) instead of failing, so that it can be one statement of a larger transaction
# (a step's checkpoint, state and event land together, activities/step/store_books.py) that a rollback would end.
_INSERT = inserts_skipping_taken(_CHECKPOINTS, ["task_id", "seq"], _CHECKPOINTS.c.id)
_CHAIN = (
    sa.select(_CHECKPOINTS)
    .where(
        _CHECKPOINTS.c.task_id == bindparam("task_id"),
        _CHECKPOINTS.c.seq >= bindparam("first"),
        _CHECKPOINTS.c.seq < bindparam("before"),
    )
    .order_by(_CHECKPOINTS.c.seq)
)


def _ref(row: Any) -> CheckpointRef:
    return CheckpointRef(id=row.id, seq=row.seq, step=row.step, hash=row.hash)


def _has_successor(connection: Connection, task_id: str, seq: int) -> bool:
    return connection.execute(_AT_SEQ, {"task_id": task_id, "seq": seq + 1}).first() is not None


def _replace_unacknowledged(connection: Connection, stale_id: int, row: CheckpointRow) -> CheckpointRef:
    """Put `row` where a different checkpoint on the same parent stands, one nothing was built on yet.

    Only a workflow's own activities append, one at a time, each from the checkpoint its last completed workflow
    task recorded. A different write from that same parent is therefore the workflow's workflow task run again:
    the first run wrote its checkpoint (from a local activity) and then failed or timed out before recording it,
    and its retry saw history as it durably is (an update the failed run had applied was never accepted, say) and
    wrote what that history says. The first row is the one no history knows: keeping it would refuse the task its
    every later write, and the task would never end."""
    connection.execute(sa.delete(_CHECKPOINTS).where(_CHECKPOINTS.c.id == stale_id))
    inserted = connection.execute(_INSERT[connection.dialect.name], row.model_dump(exclude={"id"})).first()
    if inserted is None:
        raise CheckpointConflict(f"task {row.task_id!r}: seq {row.seq} was taken again while it was replaced")
    return CheckpointRef(id=inserted.id, seq=row.seq, step=row.step, hash=row.hash)


class SqlCheckpointStore:
    """activities.step.ports.CheckpointStore on the control-plane database."""

    def __init__(self, engine: Engine, *, cache_size: int = DEFAULT_CACHE_SIZE) -> None:
        self._engine = engine
        self._cache = _ConversationCache(cache_size)

    # -- writes -------------------------------------------------------------------------

    def write_root(self, task_id: str, messages: builtins.list[Message], state: dict) -> CheckpointRef:
        """Seq 0 of a task: its opening messages (system + user). Idempotent for the same content."""
        conversation = self._write(task_id, 0, ROOT_PARENT_HASH, (), 0, _message_dicts(messages), {}, state)
        return conversation.ref.model_copy()

    def append(
        self,
        task_id: str,
        parent: CheckpointRef,
        step: int,
        new_messages: builtins.list[Message],
        scratch: dict,
        state: dict,
    ) -> CheckpointRef:
        """Seq parent.seq + 1: the messages of `step` on top of `parent`.

        A retried append of the same delta returns the existing ref. A different delta at that seq from the same
        parent replaces it while nothing is built on it (a workflow task that wrote and then failed, run again:
        `_replace_unacknowledged`); otherwise it raises CheckpointConflict (the caller writes from a stale parent).
        """
        with connected(self._engine) as connection:
            stored = connection.execute(_AT_SEQ, {"task_id": task_id, "seq": parent.seq}).first()
        if stored is None:
            raise CheckpointNotFound(f"task {task_id!r} has no checkpoint seq {parent.seq} to append to")
        if stored.id != parent.id or stored.hash != parent.hash:
            raise CheckpointConflict(
                f"parent checkpoint (id {parent.id}, seq {parent.seq}, hash {parent.hash}) is not task {task_id!r}'s "
                f"seq {parent.seq} (id {stored.id}, hash {stored.hash})"
            )
        cached = self._cache.get(parent.id)
        base: tuple[Json, ...] | int = (
            cached.messages if cached is not None and cached.ref.hash == parent.hash else stored.message_count
        )
        conversation = self._write(
            task_id, parent.seq + 1, parent.hash, base, step, _message_dicts(new_messages), scratch, state
        )
        return conversation.ref.model_copy()

    def fork(self, source_task_id: str, seq: int, new_task_id: str, state: dict) -> CheckpointRef:
        """Seq 0 of `new_task_id`: the source's conversation up to `seq`, copied once.

        The fork keeps the source's step number and scratch, so it resumes exactly where the
        source was; its later checkpoints are deltas against this root.
        """
        if new_task_id == source_task_id:
            raise ValueError(f"cannot fork task {source_task_id!r} into itself")
        ref = self.find(source_task_id, seq)
        if ref is None:
            raise CheckpointNotFound(f"task {source_task_id!r} has no checkpoint seq {seq} to fork from")
        source = self._conversation(ref.id)
        conversation = self._write(
            new_task_id, 0, ROOT_PARENT_HASH, (), source.ref.step, builtins.list(source.messages), source.scratch, state
        )
        return conversation.ref.model_copy()

    def _write(
        self,
        task_id: str,
        seq: int,
        parent_hash: str,
        base: tuple[Json, ...] | int,
        step: int,
        messages: builtins.list[Json],
        scratch: dict,
        state: dict,
    ) -> _Conversation:
        """Insert one checkpoint, or return the identical one already there.

        `base` is the parent's conversation when it is cached (the child is then cached too,
        so the next read costs nothing), else only the parent's message count.
        """
        raw = canonical_json({"step": step, "messages": messages, "scratch": scratch, "state": state})
        digest = chain_hash(parent_hash, raw)
        encoding, blob = _pack(raw)
        base_count = base if isinstance(base, int) else len(base)
        row = CheckpointRow(
            task_id=task_id, seq=seq, step=step, parent_hash=parent_hash, hash=digest,
            message_count=base_count + len(messages), encoding=encoding, delta=blob, delta_bytes=len(blob),
        )  # fmt: skip
        with connected(self._engine) as connection:
            inserted = connection.execute(_INSERT[connection.dialect.name], row.model_dump(exclude={"id"})).first()
            if inserted is not None:
                ref = CheckpointRef(id=inserted.id, seq=seq, step=step, hash=digest)
            else:  # (task, seq) is taken: by this same write retried, or by a different one
                existing = connection.execute(_AT_SEQ, {"task_id": task_id, "seq": seq}).first()
                if existing is None:
                    raise CheckpointConflict(f"task {task_id!r}: seq {seq} was taken and then was gone")
                if existing.hash == digest:
                    ref = _ref(existing)
                elif existing.parent_hash == parent_hash and seq > 0 and not _has_successor(connection, task_id, seq):
                    ref = _replace_unacknowledged(connection, existing.id, row)
                    self._cache.forget_task(task_id)
                else:
                    raise CheckpointConflict(
                        f"task {task_id!r} already has a different checkpoint at seq {seq} "
                        f"(stored hash {existing.hash}, this write {digest}); a checkpoint with a successor, or on "
                        f"another parent, is never overwritten"
                    )
        written = json.loads(raw)  # what a read from the database would give, e.g. tuples as lists
        conversation = _Conversation(
            ref=ref,
            task_id=task_id,
            messages=(base if not isinstance(base, int) else ()) + tuple(written["messages"]),
            scratch=written["scratch"],
            state=written["state"],
        )
        if not isinstance(base, int):
            # Put now, even inside a caller's transaction: an entry that a rollback leaves behind is checked
            # against the stored row (id and hash chain) by every read, as any stale entry is.
            self._cache.put(conversation)
        return conversation

    # -- reads --------------------------------------------------------------------------

    def read(self, checkpoint_id: int) -> CheckpointContent:
        """The whole conversation up to this checkpoint, verified against the hash chain."""
        return self._conversation(checkpoint_id).content()

    def read_latest(self, task_id: str) -> CheckpointContent | None:
        """The task's newest checkpoint and its conversation, verified as `read` verifies it; None for a task
        with none. One query where `latest` then `read` would be two for the same row."""
        with connected(self._engine) as connection:
            target = connection.execute(_LATEST, {"task_id": task_id}).first()
            if target is None:
                return None
            conversation = self._verified(connection, target)
        self._cache.put(conversation)
        return conversation.content()

    def _conversation(self, checkpoint_id: int) -> _Conversation:
        with connected(self._engine) as connection:
            target = connection.execute(_BY_ID, {"id": checkpoint_id}).first()
            if target is None:
                raise CheckpointNotFound(f"no checkpoint with id {checkpoint_id}")
            conversation = self._verified(connection, target)
        self._cache.put(conversation)
        return conversation

    def _verified(self, connection: Connection, target: Row) -> _Conversation:
        """`target`'s conversation, from the nearest cached checkpoint of its task when there is one."""
        base = self._cache.nearest(target.task_id, target.seq)
        if base is not None:
            try:
                return self._rebuild(connection, target, base)
            except CheckpointCorrupt:
                # The cached base may be stale (the database was replaced under this process):
                # the full chain, not the cache, decides whether the store is corrupt.
                self._cache.forget_task(target.task_id)
        return self._rebuild(connection, target, None)

    def _rebuild(self, connection: Connection, target: Row, base: _Conversation | None) -> _Conversation:
        """Apply the deltas after `base` (or from seq 0) up to `target`, checking every link."""
        task_id = target.task_id
        if base is not None and base.ref.seq == target.seq:
            if base.ref.id != target.id or base.ref.hash != target.hash:
                raise CheckpointCorrupt(f"cached checkpoint {base.ref.id} is not stored checkpoint {target.id}")
            if chain_hash(target.parent_hash, _unpack(target)) != target.hash:
                raise CheckpointCorrupt(
                    f"checkpoint {target.id} (task {task_id!r}, seq {target.seq}) does not match its hash"
                )
            return base
        first = base.ref.seq + 1 if base is not None else 0
        # One query for the whole chain, on the (task_id, seq) unique index; none when the target comes next (a
        # step's read after its parent's, the common case) or is the root.
        earlier = (
            connection.execute(_CHAIN, {"task_id": task_id, "first": first, "before": target.seq}).all()
            if first < target.seq
            else []
        )
        messages: builtins.list[Json] = builtins.list(base.messages) if base is not None else []
        parent_hash = base.ref.hash if base is not None else ROOT_PARENT_HASH
        delta: Json = {}
        for expected_seq, row in enumerate([*earlier, target], start=first):
            where = f"checkpoint {row.id} (task {task_id!r}, seq {row.seq})"
            if row.seq != expected_seq:
                raise CheckpointCorrupt(f"task {task_id!r} has no checkpoint seq {expected_seq} before seq {row.seq}")
            if row.parent_hash != parent_hash:
                raise CheckpointCorrupt(
                    f"{where} names parent hash {row.parent_hash}, but its parent's hash is {parent_hash}"
                )
            raw = _unpack(row)
            if chain_hash(parent_hash, raw) != row.hash:
                raise CheckpointCorrupt(f"{where} does not match its hash {row.hash}: its stored delta was altered")
            delta = json.loads(raw)
            messages.extend(delta["messages"])
            if len(messages) != row.message_count or delta["step"] != row.step:
                raise CheckpointCorrupt(f"{where}: its step or message count columns disagree with its content")
            parent_hash = row.hash
        return _Conversation(
            ref=_ref(target), task_id=task_id, messages=tuple(messages), scratch=delta["scratch"], state=delta["state"]
        )

    def find(self, task_id: str, seq: int) -> CheckpointRef | None:
        with connected(self._engine) as connection:
            row = connection.execute(_AT_SEQ, {"task_id": task_id, "seq": seq}).first()
        return _ref(row) if row is not None else None

    def latest(self, task_id: str) -> CheckpointRef | None:
        with Session(self._engine) as session:
            row = session.exec(
                select(CheckpointRow.id, CheckpointRow.seq, CheckpointRow.step, CheckpointRow.hash)
                .where(CheckpointRow.task_id == task_id)
                .order_by(col(CheckpointRow.seq).desc())
                .limit(1)
            ).first()
        return _ref(row) if row is not None else None

    def list(self, task_id: str) -> builtins.list[CheckpointSummary]:
        """A task's checkpoints in seq order, read from their columns (no delta is decoded)."""
        # SQLAlchemy's select (sqlmodel's is typed for four columns at most), run on a connection: Session.exec
        # takes sqlmodel's selects only.
        with connected(self._engine) as connection:
            rows = connection.execute(
                sa.select(
                    col(CheckpointRow.seq),
                    col(CheckpointRow.step),
                    col(CheckpointRow.id),
                    col(CheckpointRow.hash),
                    col(CheckpointRow.created_at),
                    col(CheckpointRow.message_count),
                    col(CheckpointRow.delta_bytes),
                )  # fmt: skip
                .where(col(CheckpointRow.task_id) == task_id)
                .order_by(col(CheckpointRow.seq))
            ).all()
        return [
            CheckpointSummary(
                seq=r.seq,
                step=r.step,
                id=r.id,
                hash=r.hash,
                created_at=r.created_at,
                message_count=r.message_count,
                delta_bytes=r.delta_bytes,
            )  # fmt: skip
            for r in rows
        ]

    def stored_bytes(self, task_id: str) -> int:
        """The bytes a task's checkpoint deltas occupy (what the storage benchmark measures)."""
        with Session(self._engine) as session:
            total = session.exec(
                select(func.coalesce(func.sum(CheckpointRow.delta_bytes), 0)).where(CheckpointRow.task_id == task_id)
            ).one()
        return int(total)
