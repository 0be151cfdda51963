"""The weights cache with real files: content-addressed entries, verified on arrival, kept across restarts."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from orchestrator.node import WeightsCache, WeightsCacheError
from orchestrator.node.weights_fill import fill_revision
from orchestrator.weights.fetchers import FileFetcher
from orchestrator.weights.files import Revision, RevisionFile, WeightsIntegrityError
from tests.unit.weights_helpers import blob_bytes, make_revision


def _fill(cache: WeightsCache, revision: Revision) -> Path:
    cache.ensure_revision(revision, "origin")
    return fill_revision(cache, revision, FileFetcher()).path


def test_an_entry_is_its_files_laid_out_as_the_revision_names_them(tmp_path: Path) -> None:
    rev = make_revision(tmp_path / "src", {"config.json": b"{}", "shards/model-1.safetensors": b"x" * 5000})
    cache = WeightsCache(tmp_path / "cache", 1 << 20)
    plan = cache.ensure_revision(rev, "origin")
    assert (plan.tier, plan.bytes_to_fetch, plan.digest) == ("origin", 5002, rev.digest)
    path = fill_revision(cache, rev, FileFetcher()).path
    assert path == plan.path == tmp_path / "cache" / "revisions" / rev.digest
    assert (path / "shards" / "model-1.safetensors").read_bytes() == b"x" * 5000
    assert (path / "config.json").stat().st_ino == (tmp_path / "cache" / "blobs" / rev.files[0].sha256).stat().st_ino
    assert cache.ensure_revision(rev, "origin").tier == "disk"
    [cached] = cache.contents()
    assert (cached.model, cached.size_bytes, cached.digest, cached.path) == ("tiny", 5002, rev.digest, path)


def test_the_digest_is_the_content_not_the_name_or_the_origin(tmp_path: Path) -> None:
    files = (RevisionFile("a", "0" * 64, 1), RevisionFile("b", "1" * 64, 2))
    one = Revision("m1", "file:///x", "main", files)
    assert one.digest == Revision("m2", "hf://o/m@abc", "abc", files[::-1]).digest
    assert one.digest != Revision("m1", "file:///x", "main", (files[0], RevisionFile("b", "1" * 64, 3))).digest


def test_two_names_for_the_same_bytes_share_one_entry(tmp_path: Path) -> None:
    rev = make_revision(tmp_path / "src", {"w.gguf": b"gguf" * 100})
    cache = WeightsCache(tmp_path / "cache", 1 << 20)
    _fill(cache, rev)
    alias = Revision("tiny-alias", rev.origin, rev.revision, rev.files)
    assert cache.ensure_revision(alias, "origin").tier == "disk"
    assert sorted(w.model for w in cache.contents()) == ["tiny", "tiny-alias"] and cache.used_bytes() == 400


def test_a_file_not_as_the_catalogue_says_is_refused_naming_it(tmp_path: Path) -> None:
    rev = make_revision(tmp_path / "src", {"w.bin": b"right bytes"})
    (tmp_path / "src" / "w.bin").write_bytes(b"wrong bytes")  # same size, other content
    cache = WeightsCache(tmp_path / "cache", 1 << 20)
    cache.ensure_revision(rev, "origin")
    with pytest.raises(
        WeightsIntegrityError,
        match=rf"refused twice: w.bin from file://.*/src/w.bin: sha256 \w+, "
        rf"the catalogue says {rev.files[0].sha256}",
    ):
        fill_revision(cache, rev, FileFetcher())
    (tmp_path / "src" / "w.bin").write_bytes(b"right bytes, and more")
    with pytest.raises(WeightsIntegrityError, match="w.bin from .*: the source has 21 bytes, the catalogue says 11"):
        fill_revision(cache, rev, FileFetcher())
    cache.release_revision(rev.digest)
    assert cache.contents() == [] and blob_bytes(tmp_path / "cache") == 0
    assert cache.free_bytes() == cache.capacity_bytes
    assert list((tmp_path / "cache" / "partial").iterdir()) == []


def test_eviction_removes_real_files_and_keeps_shared_ones(tmp_path: Path) -> None:
    cache = WeightsCache(tmp_path / "cache", 10_000)
    shared = b"t" * 1000
    a = make_revision(tmp_path / "a", {"tokenizer.json": shared, "w": b"a" * 3000}, model="a")
    b = make_revision(tmp_path / "b", {"tokenizer.json": shared, "w": b"b" * 3000}, model="b")
    _fill(cache, a)
    _fill(cache, b)
    assert blob_bytes(tmp_path / "cache") == 7000 and cache.used_bytes() == 8000  # shared blob counted twice
    c = make_revision(tmp_path / "c", {"w": b"c" * 5000}, model="c")
    cache.pin_revision(b.digest)
    assert cache.ensure_revision(c, "origin").evicted == ["a"]
    assert not (tmp_path / "cache" / "revisions" / a.digest).exists()
    assert (tmp_path / "cache" / "revisions" / b.digest / "tokenizer.json").read_bytes() == shared
    with pytest.raises(WeightsCacheError, match=r"loaded replicas pin .* \(b\)"):
        cache.ensure_revision(make_revision(tmp_path / "d", {"w": b"d" * 2000}, model="d"), "origin")
    cache.unpin_revision(b.digest)


def test_a_restart_keeps_verified_entries_and_drops_truncated_ones(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    cache = WeightsCache(root, 1 << 20)
    whole = make_revision(tmp_path / "w", {"w": b"w" * 4000}, model="whole")
    cut = make_revision(tmp_path / "c", {"w": b"c" * 4000, "x": b"x" * 10}, model="cut")
    _fill(cache, whole)
    _fill(cache, cut)
    cache.ensure_revision(make_revision(tmp_path / "p", {"w": b"p" * 4000}, model="half"), "origin")
    (root / "partial" / ("f" * 64)).write_bytes(b"half a transfer")
    with open(root / "blobs" / cut.files[0].sha256, "r+b") as f:
        f.truncate(1000)  # a disk that lost the end of a file
    (root / "blobs" / ("e" * 64)).write_bytes(b"a blob no index names")
    os.unlink(root / "revisions" / whole.digest / "w")  # someone tidied the entry's link away

    again = WeightsCache(root, 1 << 20)
    assert [(w.model, w.digest) for w in again.contents()] == [("whole", whole.digest)]
    assert (root / "revisions" / whole.digest / "w").read_bytes() == b"w" * 4000
    assert not (root / "revisions" / cut.digest).exists()
    assert sorted(p.name for p in (root / "blobs").iterdir()) == [whole.files[0].sha256]
    assert list((root / "partial").iterdir()) == []
    assert again.free_bytes() == (1 << 20) - 4000  # the reservation of the fetch in flight died with it
    assert sorted(json.loads((root / "index.json").read_text())["revisions"]) == [whole.digest]


def test_an_index_of_simulated_models_only_still_reads(tmp_path: Path) -> None:
    (tmp_path / "weights").mkdir()
    with open(tmp_path / "weights" / "m.weights", "wb") as f:
        f.truncate(1000)
    (tmp_path / "index.json").write_text(
        json.dumps({"version": 1, "models": {"m": {"size_bytes": 1000, "last_used": 5.0, "seq": 3}}})
    )
    cache = WeightsCache(tmp_path, 10_000)
    assert [(w.model, w.size_bytes, w.digest) for w in cache.contents()] == [("m", 1000, None)]


def test_a_disk_load_of_a_missing_revision_names_the_model(tmp_path: Path) -> None:
    cache = WeightsCache(tmp_path, 10_000)
    rev = make_revision(tmp_path / "src", {"w": b"w"})
    with pytest.raises(WeightsCacheError, match="'tiny' is not in this node's disk cache"):
        cache.ensure_revision(rev, "disk")
    with pytest.raises(WeightsCacheError, match="needs .* can never be cached here"):
        WeightsCache(tmp_path / "small", 1).ensure_revision(make_revision(tmp_path / "s2", {"w": b"ww"}), "origin")
