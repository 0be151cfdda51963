"""The fleet over time, for the console's charts: the fleet tables hold only the present.

Every API process samples the fleet every SAMPLE_EVERY_S (orchestrator/ui/fleet_history.py) and writes the sample
under its time bucket (seconds since the epoch // SAMPLE_EVERY_S), the table's key: when several control-plane
replicas sample the same bucket, the first write is kept and the others are skipped, so each bucket is one
sample whoever took it, and every replica draws the same lines from here. Kept KEPT_FOR (the longest window a
chart offers), the older rows deleted by the writer of each new bucket.

The table lives beside its store class rather than in tables.py: nothing else reads it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sqlalchemy import Engine, Text, bindparam, delete
from sqlmodel import Field, SQLModel

from .connections import connected, inserts_skipping_taken
from .tables import Int64, UtcDateTime, table_of

SAMPLE_EVERY_S = 15
KEPT_FOR = timedelta(hours=24)


class FleetSampleRow(SQLModel, table=True):
    """The fleet at one moment: replicas by state, and each live node's GPUs as its heartbeat reported them."""

    __tablename__ = "fleet_samples"

    bucket: int = Field(primary_key=True, sa_type=Int64, sa_column_kwargs={"autoincrement": False})
    at: datetime = Field(sa_type=UtcDateTime)
    sample_json: str = Field(sa_type=Text)


@dataclass(frozen=True)
class NodeGpus:
    """A node's GPUs at one sample: memory summed over them, utilization averaged over those that report it
    (None when none does: a GPU in MIG mode, or a node that cannot measure it)."""

    memory_used_gib: float
    memory_total_gib: float
    utilization_pct: float | None


@dataclass(frozen=True)
class FleetSample:
    at: datetime
    replicas: dict[str, int] = field(default_factory=dict)  # by state: warm, loading, …
    nodes: dict[str, NodeGpus] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(
            {
                "replicas": self.replicas,
                "nodes": {
                    n: [g.memory_used_gib, g.memory_total_gib, g.utilization_pct] for n, g in sorted(self.nodes.items())
                },
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_row(cls, at: datetime, text: str) -> FleetSample:
        data = json.loads(text)
        return cls(
            at=at,
            replicas={str(k): int(v) for k, v in data.get("replicas", {}).items()},
            nodes={
                str(n): NodeGpus(float(v[0]), float(v[1]), None if v[2] is None else float(v[2]))
                for n, v in data.get("nodes", {}).items()
            },
        )


def bucket_of(at: datetime) -> int:
    return math.floor(at.timestamp() / SAMPLE_EVERY_S)


_SAMPLES = table_of(FleetSampleRow)
_INSERT = inserts_skipping_taken(_SAMPLES, ["bucket"], _SAMPLES.c.bucket)
_FORGET = delete(_SAMPLES).where(_SAMPLES.c.bucket < bindparam("before"))
_SINCE = (
    sa.select(_SAMPLES.c.at, _SAMPLES.c.sample_json)
    .where(_SAMPLES.c.bucket >= bindparam("since"), _SAMPLES.c.bucket <= bindparam("until"))
    .order_by(_SAMPLES.c.bucket)
)
_LATEST = sa.select(sa.func.max(_SAMPLES.c.bucket))


class SqlFleetSamples:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def record(self, sample: FleetSample) -> bool:
        """Keep `sample` as its bucket's; False when the bucket already has one (another replica sampled it)."""
        bucket = bucket_of(sample.at)
        with connected(self._engine) as connection:
            written = connection.execute(
                _INSERT[connection.dialect.name],
                {"bucket": bucket, "at": sample.at, "sample_json": sample.to_json()},
            ).first()
            if written is not None:
                connection.execute(_FORGET, {"before": bucket - int(KEPT_FOR.total_seconds() / SAMPLE_EVERY_S)})
        return written is not None

    def between(self, start: datetime, end: datetime) -> list[FleetSample]:
        """The samples from `start` to `end`, oldest first."""
        with connected(self._engine) as connection:
            rows = connection.execute(_SINCE, {"since": bucket_of(start), "until": bucket_of(end)}).all()
        return [FleetSample.from_row(r.at, r.sample_json) for r in rows if start <= r.at.astimezone(UTC) <= end]

    def latest_bucket(self) -> int:
        """The newest sample's bucket (0 when there is none): what tells a live page its charts have moved on."""
        with connected(self._engine) as connection:
            return int(connection.execute(_LATEST).scalar() or 0)
