"""An index of free GPU capacity, so a cold placement never scans 80,000 GPUs.

For every schedulable, undedicated node it records, per GPU type and free-memory bucket, how
many devices have at least that much free, and how used the node already is; the node id sits in
one sorted list per (datacenter, type, capacity class, bucket, device count, use). A query for "d
devices with ≥ n GiB" reads the lists of the largest bucket ≤ n with count ≥ d: a superset of the
nodes that fit (some devices there have between the bucket and n free), which the caller checks
exactly. The lists are read in the order that strands least (the pool's fragmentation term): nodes
where a qualifying device already serves a replica (a new one there strands less of that GPU than of
a fresh one of the type), then nodes serving replicas on other devices (no whole free node broken),
then fresh nodes; within each, fewest qualifying devices first.
Lists are kept sorted by node id so iteration, and with it every decision, depends only on
the fleet's contents, never on the order it was built in. Updates are incremental: one
node's devices change, only that node's entries move.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator
from dataclasses import dataclass

# Free-memory thresholds in GiB. Consecutive buckets differ by ≤ 1.5× above 4 GiB, so a query
# reads at most ~50% more memory range than it needs; ~20 buckets × 8 devices bound the work
# of re-indexing one node after a placement.
MEMORY_BUCKETS: tuple[float, ...] = (0, 1, 2, 3, 4, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96, 128, 160)


def bucket_below(gib: float) -> int:
    """Index of the largest bucket ≤ gib (0 for anything below 1 GiB)."""
    return max(bisect_right(MEMORY_BUCKETS, gib) - 1, 0)


@dataclass(frozen=True)
class DeviceFree:
    """What the index needs from one device: its type, free memory, and whether a replica already uses it."""

    type_name: str
    free_gib: float
    in_use: bool = False


GroupKey = tuple[str, str, str]  # (datacenter, GPU type, capacity class)
# How used a node is, for one query: its qualifying devices already serve a replica, other devices of it do, or
# none does. Lower strands less.
SHARED_DEVICE, SHARED_NODE, FRESH_NODE = 0, 1, 2
ListKey = tuple[str, str, str, int, int, int]  # a group, bucket, device count, use
Qualifying = tuple[int, int]  # devices of a type with at least a bucket free, and the node's use for them


class FreeCapacityIndex:
    """Sorted node-id lists keyed by (datacenter, type, capacity class, bucket, device count, use)."""

    def __init__(self) -> None:
        self._lists: dict[ListKey, list[str]] = {}
        # node id → (group keys it sits in, {(type, bucket): (count, use)}); what to remove on update.
        self._entries: dict[str, tuple[str, str, dict[tuple[str, int], Qualifying]]] = {}
        self._max_count: dict[GroupKey, int] = {}
        # (group, bucket) → the (use, count) of its non-empty lists: a query reads only lists that hold nodes.
        self._levels: dict[tuple[str, str, str, int], set[Qualifying]] = {}
        self._groups: list[GroupKey] | None = None  # sorted cache of _max_count's keys
        self._best: dict[str, dict[int, int]] = {}  # node id → bucket → most devices of one type there

    def update(self, node_id: str, datacenter: str, capacity: str, devices: list[DeviceFree] | None) -> None:
        """(Re)index one node; `devices=None` takes it out (unhealthy, draining, dedicated, gone)."""
        new: dict[tuple[str, int], Qualifying] = {}
        if devices is not None:
            unshared = SHARED_NODE if any(dev.in_use for dev in devices) else FRESH_NODE
            for dev in devices:
                top = bucket_below(dev.free_gib) if dev.free_gib > 0 else -1
                for b in range(top + 1):
                    count, use = new.get((dev.type_name, b), (0, unshared))
                    new[(dev.type_name, b)] = (count + 1, SHARED_DEVICE if dev.in_use else use)
        # A node not indexed yet sits in no list: as if it had been indexed in the same place with no devices.
        old_datacenter, old_capacity, old_counts = self._entries.get(node_id, (datacenter, capacity, {}))
        if (old_datacenter, old_capacity) != (datacenter, capacity):
            self._remove_all(node_id, old_datacenter, old_capacity, old_counts)
            old_counts = {}
        for key, (count, use) in old_counts.items():
            if new.get(key) != (count, use):
                self._drop(node_id, (old_datacenter, key[0], old_capacity, key[1], count, use))
        for key, (count, use) in new.items():
            if old_counts.get(key) != (count, use):
                insort(self._lists.setdefault((datacenter, key[0], capacity, key[1], count, use), []), node_id)
                self._levels.setdefault((datacenter, key[0], capacity, key[1]), set()).add((use, count))
                group = (datacenter, key[0], capacity)
                if group not in self._max_count:
                    self._groups = None
                self._max_count[group] = max(self._max_count.get(group, 0), count)
        if new:
            self._entries[node_id] = (datacenter, capacity, new)
            best: dict[int, int] = {}
            for (_, b), (c, _use) in new.items():
                best[b] = max(best.get(b, 0), c)
            self._best[node_id] = best
        else:
            self._entries.pop(node_id, None)
            self._best.pop(node_id, None)

    def groups(self) -> list[GroupKey]:
        """Every (datacenter, type, capacity class) seen, sorted: the query's outer loop."""
        if self._groups is None:
            self._groups = sorted(self._max_count)
        return self._groups

    def may_fit(self, node_id: str, need_gib: float, count: int) -> bool:
        """A cheap necessary condition for `count` devices with ≥ need_gib free on this node."""
        best = self._best.get(node_id)
        return best is not None and best.get(bucket_below(need_gib), 0) >= count

    def fit_rank(self, node_id: str, type_name: str, bucket: int, count: int) -> Qualifying | None:
        """Where `nodes` would list this node for a query of `count` devices in `bucket` (bucket_below of the
        need): its use, then how many devices qualify, as a sort key; None where it cannot have `count` such
        devices. For callers that hold their own list of nodes (the few caching a model) and want the index's
        order without its lists."""
        entry = self._entries.get(node_id)
        qualifying = entry[2].get((type_name, bucket)) if entry is not None else None
        if qualifying is None or qualifying[0] < count:
            return None
        return (qualifying[1], qualifying[0])

    def nodes(self, group: GroupKey, need_gib: float, count: int) -> Iterator[str]:
        """Node ids that may have `count` devices of the group's type with ≥ need_gib free.

        In the order that strands least (the module's docstring): by use, then fewest qualifying devices (a gang
        that fills a node exactly fragments least), then node id. A superset: the caller checks each node exactly.
        """
        yield from self.nodes_across([group], need_gib, count)

    def nodes_across(self, groups: list[GroupKey], need_gib: float, count: int) -> Iterator[str]:
        """`nodes` of several groups (one GPU type and class in several datacenters) merged, in the same order
        across all of them, so the tightest fit of any datacenter comes before a looser one."""
        b = bucket_below(need_gib)
        levels: set[Qualifying] = set()
        for dc, type_name, capacity in groups:
            levels.update(self._levels.get((dc, type_name, capacity, b), ()))
        for use, c in sorted(level for level in levels if level[1] >= count):
            for dc, type_name, capacity in groups:
                yield from self._lists.get((dc, type_name, capacity, b, c, use), ())

    def _drop(self, node_id: str, key: ListKey) -> None:
        lst = self._lists.get(key)
        if lst:
            i = bisect_left(lst, node_id)
            if i < len(lst) and lst[i] == node_id:
                del lst[i]
                if not lst:
                    dc, type_name, capacity, b, count, use = key
                    self._levels[(dc, type_name, capacity, b)].discard((use, count))

    def _remove_all(self, node_id: str, dc: str, capacity: str, counts: dict[tuple[str, int], Qualifying]) -> None:
        for (type_name, b), (count, use) in counts.items():
            self._drop(node_id, (dc, type_name, capacity, b, count, use))
