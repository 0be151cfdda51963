"""Replicas with a free slot, kept in classes so that a decision finds the exact best without scanning them all.

Two replicas of a model on the same side of the tenant boundary and of the same capacity class score the
same but for their wait when they also share a tier (warm or loading), a batch throughput, a number of
slots, a slowest device, a price for the devices they hold, a spot risk and how many replicas generate on their
busiest GPU (co-residents slow each other, which the latency objectives' predictions count): every other term of the score
(`scorers.py`) is then the same number for both. Within a class the total grows with the wait (the queue's
drain per slot, plus the load estimate of a loading replica) as long as no weight is negative, and equal
totals go to the smaller node id, then devices, as the full ranking breaks ties. So a class's list, sorted
by (wait, node id, devices), holds its best replica first, and the first replicas of every class that pass
the request's filters include the exact best of all. A fleet has few classes per model (one per kind of
node it runs on), however many replicas it has.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterator
from dataclasses import dataclass

SpareKey = tuple[str, str | None, str]  # (model, boundary owner, capacity class)
# (tier, batch tokens/s, slots, slowest device's speed, $/h of the devices held, the node's own spot risk or None,
# replicas generating on its busiest GPU with it counted)
ReplicaClass = tuple[str, float, int, float, float, float | None, int]
Entry = tuple[float, str, tuple[int, ...], str]  # (wait seconds, node id, devices, replica id)


@dataclass(frozen=True)
class SpareSlot:
    """Where a replica sits in the index, so that taking it out finds the same list."""

    key: SpareKey
    replica_class: ReplicaClass
    entry: Entry


class SpareReplicas:
    """(model, boundary owner, capacity class) → replica class → its replicas with a free slot, best first."""

    def __init__(self) -> None:
        self._classes: dict[SpareKey, dict[ReplicaClass, list[Entry]]] = {}

    def add(self, slot: SpareSlot) -> None:
        insort(self._classes.setdefault(slot.key, {}).setdefault(slot.replica_class, []), slot.entry)

    def remove(self, slot: SpareSlot) -> None:
        classes = self._classes.get(slot.key)
        if classes is None:
            return
        entries = classes.get(slot.replica_class)
        if not entries:
            return
        i = bisect_left(entries, slot.entry)
        if i < len(entries) and entries[i] == slot.entry:
            del entries[i]
        if not entries:
            del classes[slot.replica_class]

    def classes(self, key: SpareKey) -> Iterator[list[Entry]]:
        """Each class's replicas, best first; the classes in a fixed order (so decisions never depend on history)."""
        classes = self._classes.get(key, {})
        for replica_class in sorted(classes, key=_class_order):
            yield classes[replica_class]


def _class_order(replica_class: ReplicaClass) -> tuple:
    tier, rate, slots, speed, usd, risk, shared = replica_class
    return tier, rate, slots, speed, usd, -1.0 if risk is None else risk, shared
