"""A hypothesis state machine drives the weights cache with real files and simulated models: whatever the
order of plans, fetches, failures, pins, evictions and restarts, the cache never holds or promises more
than its capacity, its real files are exactly its entries', and every entry it reports is on disk whole."""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from orchestrator.node import WeightsCache, WeightsCacheError
from orchestrator.node.weights_fill import fill_revision
from orchestrator.weights.fetchers import FileFetcher
from orchestrator.weights.files import Revision, RevisionFile

CAPACITY = 10_000
# Revisions drawn from a small pool of file contents, so revisions share files as real ones share a tokenizer.
CONTENTS = [bytes([i]) * size for i, size in enumerate((300, 700, 1500, 2500, 4000, 6000))]


class CacheMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="berth-cache-prop-"))
        self.src = self.tmp / "src"
        self.src.mkdir()
        for data in CONTENTS:
            (self.src / hashlib.sha256(data).hexdigest()[:8]).write_bytes(data)
        self.cache = WeightsCache(self.tmp / "cache", CAPACITY)
        self.pins: list[tuple[str, str]] = []  # ("model", name) or ("revision", digest)
        self.in_flight: dict[str, Revision] = {}

    def teardown(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def revision(self, picks: list[int]) -> Revision:
        files = []
        for i in sorted(set(picks)):
            data = CONTENTS[i]
            name = hashlib.sha256(data).hexdigest()[:8]
            files.append(RevisionFile(name, hashlib.sha256(data).hexdigest(), len(data)))
        return Revision(f"m{''.join(map(str, sorted(set(picks))))}", self.src.as_uri(), "main", tuple(files))

    @rule(picks=st.lists(st.integers(0, len(CONTENTS) - 1), min_size=1, max_size=3), complete=st.booleans())
    def load_revision(self, picks: list[int], complete: bool) -> None:
        rev = self.revision(picks)
        try:
            plan = self.cache.ensure_revision(rev, "origin")
        except WeightsCacheError:
            return
        if plan.tier == "disk":
            return
        if complete:
            fill_revision(self.cache, rev, FileFetcher(), parallel=1)
            self.in_flight.pop(rev.digest, None)
        else:
            self.in_flight[rev.digest] = rev

    @precondition(lambda self: self.in_flight)
    @rule(data=st.data(), succeed=st.booleans())
    def finish_in_flight(self, data: st.DataObject, succeed: bool) -> None:
        digest = data.draw(st.sampled_from(sorted(self.in_flight)))
        rev = self.in_flight.pop(digest)
        if succeed:
            fill_revision(self.cache, rev, FileFetcher(), parallel=1)
        else:
            self.cache.release_revision(digest)

    @rule(name=st.sampled_from(["s1", "s2", "s3"]), size=st.integers(1, 5000))
    def load_simulated(self, name: str, size: int) -> None:
        try:
            if self.cache.ensure(name, size, "datacenter").tier != "disk":
                self.cache.record_loaded(name, size)
        except WeightsCacheError:
            pass

    @rule(data=st.data())
    def pin_something(self, data: st.DataObject) -> None:
        held = self.cache.contents()
        if not held:
            return
        w = data.draw(st.sampled_from(held))
        if w.digest is None:
            self.cache.pin(w.model)
            self.pins.append(("model", w.model))
        else:
            self.cache.pin_revision(w.digest)
            self.pins.append(("revision", w.digest))

    @precondition(lambda self: self.pins)
    @rule(data=st.data())
    def unpin_something(self, data: st.DataObject) -> None:
        kind, name = self.pins.pop(data.draw(st.integers(0, len(self.pins) - 1)))
        (self.cache.unpin if kind == "model" else self.cache.unpin_revision)(name)

    @rule(size=st.integers(1, CAPACITY))
    def evict(self, size: int) -> None:
        before = {(w.model, w.digest) for w in self.cache.contents()}
        try:
            self.cache.evict_for(size)
        except WeightsCacheError:
            assert {(w.model, w.digest) for w in self.cache.contents()} == before  # all or nothing

    @rule()
    def restart(self) -> None:
        self.cache = WeightsCache(self.tmp / "cache", CAPACITY)
        self.pins.clear()
        self.in_flight.clear()  # their reservations died with the process

    @invariant()
    def never_beyond_capacity(self) -> None:
        assert self.cache.used_bytes() <= CAPACITY and self.cache.free_bytes() >= 0
        root = self.tmp / "cache"
        blobs = sum(p.stat().st_size for p in (root / "blobs").iterdir())
        sparse = sum(p.stat().st_size for p in (root / "weights").iterdir())
        assert blobs + sparse <= CAPACITY  # what is really on disk, shared files once

    @invariant()
    def what_it_reports_is_on_disk_whole(self) -> None:
        for w in self.cache.contents():
            if w.digest is not None:
                assert (
                    w.path is not None
                    and sum(p.stat().st_size for p in w.path.rglob("*") if p.is_file()) == w.size_bytes
                )
            else:
                assert self.cache.path_of(w.model).stat().st_size == w.size_bytes


TestWeightsCacheProperties = CacheMachine.TestCase
TestWeightsCacheProperties.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
