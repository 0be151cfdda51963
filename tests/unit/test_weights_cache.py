"""The node's weights cache: LRU eviction, pins, capacity, restart, sparse files."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from orchestrator.node import WeightsCache, WeightsCacheError

GB = 10**9


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        self.now += 1
        return self.now


def _cache(root: Path, capacity: int = 100 * GB) -> WeightsCache:
    return WeightsCache(root, capacity, clock=Clock())


def test_ensure_plans_the_tier_and_the_bytes_to_fetch(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    plan = cache.ensure("llama-3.1-8b", 16 * GB, "datacenter")
    assert (plan.tier, plan.bytes_to_fetch, plan.evicted) == ("datacenter", 16 * GB, [])
    cache.record_loaded("llama-3.1-8b", 16 * GB)
    assert cache.has("llama-3.1-8b")
    plan = cache.ensure("llama-3.1-8b", 16 * GB, "origin")
    assert (plan.tier, plan.bytes_to_fetch) == ("disk", 0)
    with pytest.raises(WeightsCacheError, match="'qwen2.5-7b' is not in this node's disk cache"):
        cache.ensure("qwen2.5-7b", 15 * GB, "disk")
    with pytest.raises(ValueError, match="source must be one of disk, datacenter, origin"):
        cache.ensure("qwen2.5-7b", 15 * GB, "s3")  # type: ignore[arg-type]


def test_least_recently_used_weights_are_evicted_first(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    for model in ("a", "b", "c"):
        cache.record_loaded(model, 30 * GB)
    cache.touch("a")  # now b is the least recently used
    assert [w.model for w in cache.contents()] == ["a", "c", "b"]
    plan = cache.ensure("d", 50 * GB, "origin")  # 10 free: b and c must go, a stays
    assert plan.evicted == ["b", "c"]
    assert not (cache.has("b") or cache.has("c")) and cache.has("a")
    assert not cache.path_of("b").exists()
    assert cache.free_bytes() == 100 * GB - 30 * GB - 50 * GB  # d's room is reserved
    cache.record_loaded("d", 50 * GB)
    assert [w.model for w in cache.contents()] == ["d", "a"] and cache.used_bytes() == 80 * GB
    assert cache.touch("gone") is False


def test_pinned_weights_are_never_evicted(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    cache.record_loaded("served", 50 * GB)
    cache.record_loaded("idle", 40 * GB)
    cache.pin("served")
    cache.pin("served")  # two replicas on two GPUs
    assert cache.evict_for(50 * GB) == ["idle"]
    with pytest.raises(WeightsCacheError, match=r"loaded replicas pin 46\.6 GiB \(served\)"):
        cache.evict_for(60 * GB)
    assert cache.has("served")
    cache.unpin("served")
    with pytest.raises(WeightsCacheError):
        cache.evict_for(60 * GB)  # one replica still holds it
    cache.unpin("served")
    assert cache.evict_for(60 * GB) == ["served"]
    assert [w.pinned for w in cache.contents()] == []
    with pytest.raises(WeightsCacheError, match="cannot pin 'nothing'"):
        cache.pin("nothing")


def test_eviction_is_all_or_nothing(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    cache.record_loaded("old", 30 * GB)
    cache.record_loaded("pinned", 60 * GB)
    cache.pin("pinned")
    with pytest.raises(WeightsCacheError):
        cache.ensure("big", 50 * GB, "origin")
    assert cache.has("old")  # evicting it would not have made room, so it stays


def test_a_model_larger_than_the_whole_cache_is_refused(tmp_path: Path) -> None:
    cache = _cache(tmp_path, capacity=100 * GB)
    cache.record_loaded("small", 10 * GB)
    with pytest.raises(WeightsCacheError, match=r"'llama-3.1-405b' needs 754\.4 GiB .* 93\.1 GiB in all"):
        cache.ensure("llama-3.1-405b", 810 * GB, "origin")
    with pytest.raises(WeightsCacheError, match="can never be cached here"):
        cache.record_loaded("llama-3.1-405b", 810 * GB)
    assert cache.has("small")
    with pytest.raises(ValueError, match="must be positive"):
        cache.ensure("zero", 0, "origin")


def test_reservations_keep_two_loads_in_flight_from_sharing_room(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    cache.record_loaded("old", 40 * GB)
    assert cache.ensure("x", 50 * GB, "origin").evicted == []
    assert cache.ensure("x", 50 * GB, "origin").evicted == []  # the same fetch asked twice
    assert cache.ensure("y", 50 * GB, "origin").evicted == ["old"]
    with pytest.raises(WeightsCacheError, match=r"cannot free 9\.3 GiB .*: 93\.1 GiB is reserved for loads in flight"):
        cache.ensure("z", 10 * GB, "origin")
    cache.release("y")
    assert cache.ensure("z", 10 * GB, "origin").evicted == []


def test_new_weights_under_the_same_name_replace_the_old(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    cache.record_loaded("m", 10 * GB)
    plan = cache.ensure("m", 12 * GB, "datacenter")
    assert (plan.tier, plan.bytes_to_fetch) == ("datacenter", 12 * GB) and not cache.has("m")
    cache.record_loaded("m", 12 * GB)
    assert cache.path_of("m").stat().st_size == 12 * GB
    cache.pin("m")
    with pytest.raises(WeightsCacheError, match="cannot replace the weights of 'm' .* a loaded replica uses them"):
        cache.ensure("m", 14 * GB, "origin")
    assert cache.ensure("m", 12 * GB, "origin").tier == "disk"


def test_files_are_sparse(tmp_path: Path) -> None:
    cache = _cache(tmp_path, capacity=200 * GB)
    cache.record_loaded("meta-llama/Llama-3.1-70B", 140 * GB)
    path = cache.path_of("meta-llama/Llama-3.1-70B")
    assert path.parent == tmp_path / "weights"  # the slash does not make a directory
    assert path.stat().st_size == 140 * GB
    assert path.stat().st_blocks * 512 < 1024 * 1024  # nothing allocated


def test_the_cache_survives_a_restart_and_drops_what_disappeared(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    for model in ("a", "b", "c"):
        cache.record_loaded(model, 10 * GB)
    cache.touch("a")
    cache.pin("b")
    cache.path_of("c").unlink()  # someone cleaned the disk
    (tmp_path / "weights" / "orphan.weights").write_bytes(b"half a download")

    again = _cache(tmp_path)
    assert [(w.model, w.size_bytes, w.pinned) for w in again.contents()] == [
        ("a", 10 * GB, False),
        ("b", 10 * GB, False),  # pins are not restored: no replica is loaded after a restart
    ]
    assert not (tmp_path / "weights" / "orphan.weights").exists()
    again.record_loaded("d", 10 * GB)  # the LRU counter continues after the restored ones
    assert [w.model for w in again.contents()] == ["d", "a", "b"]
    index = json.loads((tmp_path / "index.json").read_text())
    assert sorted(index["models"]) == ["a", "b", "d"]


def test_an_unreadable_index_starts_empty(tmp_path: Path) -> None:
    _cache(tmp_path).record_loaded("a", GB)
    (tmp_path / "index.json").write_text("{not json")
    cache = _cache(tmp_path)
    assert cache.contents() == [] and not cache.path_of("a").exists()


def test_concurrent_loads_never_exceed_capacity(tmp_path: Path) -> None:
    cache = _cache(tmp_path, capacity=50 * GB)

    def load(i: int) -> None:
        for j in range(20):
            model = f"m{i}-{j % 5}"
            try:
                if cache.ensure(model, 7 * GB, "origin").tier != "disk":
                    cache.record_loaded(model, 7 * GB)
            except WeightsCacheError:
                pass
            assert cache.used_bytes() <= 50 * GB

    threads = [threading.Thread(target=load, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert cache.used_bytes() <= 50 * GB
    assert sum(1 for _ in (tmp_path / "weights").iterdir()) == len(cache.contents())
