"""Fetching real weights from each kind of origin: resume, refusal and refetch, and errors that name the URL.

The HTTP origin is a real loopback server (`weights_helpers.loopback_origin`) that can cut a transfer
mid-file, flip a byte, ignore ranges or answer a status; the Hub and a bucket are stood in for by it
through HF_ENDPOINT and BERTH_S3_ENDPOINT.
"""

from __future__ import annotations

import hashlib
import socket
import threading
import time
from pathlib import Path

import pytest

from orchestrator.node import WeightsCache
from orchestrator.node.weights_fill import FillReport, fill_revision
from orchestrator.weights.fetchers import (
    FileFetcher,
    HfFetcher,
    HttpFetcher,
    PackageFetcher,
    S3Fetcher,
    WeightsFetchError,
    origin_fetcher,
)
from orchestrator.weights.fetchers.hf import parse_hf_origin
from orchestrator.weights.files import Revision, WeightsIntegrityError
from orchestrator.weights.floor import RateWatch, TransferFloor, TransferStalled
from tests.unit.weights_helpers import loopback_origin, make_revision

MB = 1 << 20


def _cache(tmp_path: Path) -> WeightsCache:
    return WeightsCache(tmp_path / "cache", 64 * MB)


def _fill(cache: WeightsCache, rev: Revision, fetcher, **kw) -> FillReport:  # type: ignore[no-untyped-def]
    cache.ensure_revision(rev, "origin")
    try:
        return fill_revision(cache, rev, fetcher, backoff_s=0.01, **kw)
    except BaseException:
        cache.release_revision(rev.digest)
        raise


def _http(rev: Revision, url: str) -> Revision:
    return Revision(rev.model, url, rev.revision, rev.files)


def test_an_http_transfer_cut_mid_file_resumes_with_a_range_request(tmp_path: Path) -> None:
    data = bytes(range(256)) * 8192  # 2 MiB
    rev = make_revision(tmp_path / "src", {"model.safetensors": data, "config.json": b'{"a": 1}'})
    cache = _cache(tmp_path)
    with loopback_origin(tmp_path / "src") as origin:
        origin.cut_after["model.safetensors"] = 700_000
        report = _fill(cache, _http(rev, origin.url), HttpFetcher(), parallel=1)
    ranges = [r for p, r in zip(origin.paths, origin.ranges) if p == "model.safetensors"]
    assert ranges == [None, "bytes=700000-"]  # the second request asked only for the rest
    assert (report.path / "model.safetensors").read_bytes() == data
    assert report.bytes_fetched == len(data) + 8 and report.files == 2 and report.tier == "origin"
    assert report.seconds > 0 and report.bytes_per_s > 0


def test_a_server_that_ignores_ranges_is_read_again_from_the_start(tmp_path: Path) -> None:
    data = b"z" * 300_000
    rev = make_revision(tmp_path / "src", {"w": data})
    with loopback_origin(tmp_path / "src") as origin:
        origin.cut_after["w"] = 100_000
        origin.ignore_ranges = True
        report = _fill(_cache(tmp_path), _http(rev, origin.url), HttpFetcher())
    assert origin.ranges == [None, "bytes=100000-"] and (report.path / "w").read_bytes() == data


def test_a_corrupted_transfer_is_refused_and_fetched_again(tmp_path: Path) -> None:
    rev = make_revision(tmp_path / "src", {"w": b"good bytes" * 1000})
    with loopback_origin(tmp_path / "src") as origin:
        origin.corrupt["w"] = 1
        report = _fill(_cache(tmp_path), _http(rev, origin.url), HttpFetcher())
        assert origin.paths == ["w", "w"] and (report.path / "w").read_bytes() == b"good bytes" * 1000
        origin.corrupt["w"] = 2
        cache = WeightsCache(tmp_path / "other", MB)
        with pytest.raises(
            WeightsIntegrityError,
            match=rf"refused twice: w from {origin.url}/w: sha256 [0-9a-f]{{64}}, "
            rf"the catalogue says {rev.files[0].sha256}",
        ):
            _fill(cache, _http(rev, origin.url), HttpFetcher())
    assert cache.contents() == [] and cache.free_bytes() == MB


def test_bad_origins_are_named_with_the_status(tmp_path: Path) -> None:
    rev = make_revision(tmp_path / "src", {"w": b"w" * 100, "x": b"x"})
    with loopback_origin(tmp_path / "src") as origin:
        (tmp_path / "src" / "x").unlink()
        with pytest.raises(WeightsFetchError, match=rf"{origin.url}/x: HTTP 404 Not Found"):
            _fill(_cache(tmp_path), _http(rev, origin.url), HttpFetcher(), parallel=1)
        origin.status["w"] = 503
        with pytest.raises(WeightsFetchError, match=rf"{origin.url}/w: HTTP 503 .*tried 5 times without progress"):
            _fill(_cache(tmp_path), _http(rev, origin.url), HttpFetcher(), parallel=1)
        (tmp_path / "src" / "x").write_bytes(b"xy")
        del origin.status["w"]
        with pytest.raises(WeightsIntegrityError, match="x from .*: the source has 2 bytes, the catalogue says 1"):
            _fill(_cache(tmp_path), _http(rev, origin.url), HttpFetcher(), parallel=1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"  # bound, not listening: refused
        with pytest.raises(WeightsFetchError, match=rf"cannot reach {dead}/w: ConnectError"):
            _fill(_cache(tmp_path), _http(rev, dead), HttpFetcher(), parallel=1)


def test_file_and_package_origins_copy_or_link_real_bytes(tmp_path: Path) -> None:
    rev = make_revision(tmp_path / "src", {"a/b.bin": b"bytes" * 10})
    report = _fill(_cache(tmp_path), rev, origin_fetcher(rev))
    assert (report.path / "a" / "b.bin").read_bytes() == b"bytes" * 10
    assert (report.path / "a" / "b.bin").stat().st_ino != (tmp_path / "src" / "a" / "b.bin").stat().st_ino  # a copy
    missing = Revision("m", (tmp_path / "nowhere").as_uri(), "main", rev.files)
    with pytest.raises(WeightsFetchError, match=r"file://.*/nowhere/a/b.bin: no such file"):
        _fill(_cache(tmp_path / "empty"), missing, FileFetcher())
    # A package that ships files: pytest's own __init__.py stands in for a model file.
    init = Path(pytest.__file__)
    shipped = Revision(
        "p", "package://pytest", "main", make_revision(tmp_path / "x", {"__init__.py": init.read_bytes()}).files
    )
    report = _fill(_cache(tmp_path / "pkg"), shipped, origin_fetcher(shipped))
    assert isinstance(origin_fetcher(shipped), PackageFetcher)
    assert (report.path / "__init__.py").read_bytes() == init.read_bytes()
    with pytest.raises(WeightsFetchError, match="package://no_such_pkg: Python package 'no_such_pkg' is not installed"):
        _fill(
            _cache(tmp_path / "pkg2"), Revision("p", "package://no_such_pkg", "main", shipped.files), PackageFetcher()
        )


def test_hf_origins_map_to_the_hub_url_and_name_its_refusals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_hf_origin("hf://HuggingFaceTB/SmolLM2-135M-Instruct@12fd25f", "main") == (
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        "12fd25f",
    )
    assert parse_hf_origin("hf://org/model", "v1.0") == ("org/model", "v1.0")
    for bad in ("hf://model", "hf://org/model@", "hf://a/b/c"):
        with pytest.raises(WeightsFetchError, match="hf://org/model or hf://org/model@revision"):
            parse_hf_origin(bad, "main")
    hub = tmp_path / "hub"
    rev = make_revision(
        hub / "org" / "model" / "resolve" / "abc123", {"tokenizer.json": b"{}" * 50}, origin="hf://org/model@abc123"
    )
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    with loopback_origin(hub) as origin:
        monkeypatch.setenv("HF_ENDPOINT", origin.url)
        report = _fill(_cache(tmp_path), rev, origin_fetcher(rev))
        assert origin.paths == ["org/model/resolve/abc123/tokenizer.json"]
        assert origin.headers[0]["authorization"] == "Bearer hf_test_token"
        assert (report.path / "tokenizer.json").read_bytes() == b"{}" * 50
        origin.status["org/model/resolve/abc123/tokenizer.json"] = 401
        with pytest.raises(
            WeightsFetchError,
            match=r"hf://org/model@abc123/tokenizer.json: HTTP 401 Unauthorized "
            r"\(GatedRepo; the repository is gated or private: set HF_TOKEN",
        ):
            _fill(_cache(tmp_path / "b"), rev, HfFetcher())
        origin.status["org/model/resolve/abc123/tokenizer.json"] = 404
        with pytest.raises(WeightsFetchError, match=r"HTTP 404 Not Found \(RepoNotFound; no such repository"):
            _fill(_cache(tmp_path / "c"), rev, HfFetcher())


def test_s3_reads_a_public_bucket_anonymously_and_says_when_it_needs_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rev = make_revision(
        tmp_path / "s3" / "models-bucket" / "smol" / "v1", {"w.gguf": b"g" * 4096}, origin="s3://models-bucket/smol/v1"
    )
    fetcher = S3Fetcher(use_boto3=False)
    assert fetcher.request_url(rev, rev.files[0]) == "https://models-bucket.s3.amazonaws.com/smol/v1/w.gguf"
    with loopback_origin(tmp_path / "s3") as origin:
        monkeypatch.setenv("BERTH_S3_ENDPOINT", origin.url)
        report = _fill(_cache(tmp_path), rev, S3Fetcher(use_boto3=False))
        assert origin.paths == ["models-bucket/smol/v1/w.gguf"] and (report.path / "w.gguf").read_bytes() == b"g" * 4096
        origin.status["models-bucket/smol/v1/w.gguf"] = 403
        with pytest.raises(
            WeightsFetchError,
            match=r"s3://models-bucket/smol/v1/w.gguf: HTTP 403 Forbidden \(the "
            r"bucket does not allow anonymous reads: give AWS credentials",
        ):
            _fill(_cache(tmp_path / "b"), rev, S3Fetcher(use_boto3=False))


def test_s3_with_credentials_reads_through_boto3_with_a_range(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("boto3")
    data = b"s" * 600_000
    rev = make_revision(tmp_path / "s3" / "bkt" / "m", {"w": data}, origin="s3://bkt/m")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIATEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with loopback_origin(tmp_path / "s3") as origin:
        monkeypatch.setenv("BERTH_S3_ENDPOINT", origin.url)
        origin.cut_after["bkt/m/w"] = 200_000
        report = _fill(_cache(tmp_path), rev, S3Fetcher())
    assert origin.headers[0]["authorization"].startswith("AWS4-HMAC-SHA256")  # signed, by boto3
    assert origin.ranges[-1] == "bytes=200000-" and (report.path / "w").read_bytes() == data


def test_an_origin_that_trickles_is_abandoned_after_the_floors_window_with_its_rate(tmp_path: Path) -> None:
    data = generated_bytes(2 * MB)
    rev = make_revision(tmp_path / "src", {"w": data})
    cache = _cache(tmp_path)
    stop = threading.Event()
    patience = threading.Timer(60, stop.set)  # without a floor the fill would take ~17 min: stop it, and fail
    with loopback_origin(tmp_path / "src") as origin:
        origin.trickle["w"] = (1024, 0.5)  # 2 KiB/s: every read gets a byte long before it times out
        began = time.monotonic()
        patience.start()
        try:
            with pytest.raises(TransferStalled) as stalled:
                _fill(cache, _http(rev, origin.url), HttpFetcher(), stop=stop, floor=TransferFloor(MB, 2.0))
        finally:
            patience.cancel()
    assert time.monotonic() - began < 2.0 + 10.0  # the window, plus at most one read
    assert 0 < stalled.value.bytes_per_s < MB and stalled.value.window_s == 2.0
    assert "below the floor" in str(stalled.value) and origin.url in str(stalled.value)


def test_the_floor_is_judged_over_a_sliding_window_once_a_whole_window_has_run() -> None:
    floor = TransferFloor(bytes_per_s=1000, window_s=10)
    watch = RateWatch(floor, now=0)
    watch.add(100, now=1)
    watch.check(now=9.9, named="src")  # not a whole window yet: a slow start is no stall
    watch.add(20_000, now=9.95)
    watch.check(now=15, named="src")  # 20,100 bytes in the last 10 s: above the floor
    watch.add(500, now=18)
    with pytest.raises(TransferStalled) as stalled:
        watch.check(now=20, named="src")  # the burst left the window: 500 bytes in 10 s
    assert stalled.value.bytes_in_window == 500 and stalled.value.bytes_per_s == 50


def test_a_fast_fill_is_unaffected_by_the_floor(tmp_path: Path) -> None:
    data = generated_bytes(2 * MB)
    rev = make_revision(tmp_path / "src", {"w": data})
    with loopback_origin(tmp_path / "src") as origin:
        report = _fill(_cache(tmp_path), _http(rev, origin.url), HttpFetcher(), floor=TransferFloor(MB, 5.0))
    assert (report.path / "w").read_bytes() == data


def generated_bytes(size: int) -> bytes:
    return hashlib.sha256(str(size).encode()).digest() * (size // 32)


def test_the_floor_is_the_fills_together_so_a_link_shared_by_parallel_files_is_no_stall(tmp_path: Path) -> None:
    files = {"a": generated_bytes(3 * MB), "b": generated_bytes(3 * MB + 32)}
    rev = make_revision(tmp_path / "src", files)
    floor = TransferFloor(bytes_per_s=0.75 * MB, window_s=2.0)
    with loopback_origin(tmp_path / "src") as origin:
        for path in files:
            origin.trickle[path] = (64 * 1024, 0.1)  # 640 KiB/s each: under the floor alone, 1.25 MiB/s together
        report = _fill(_cache(tmp_path), _http(rev, origin.url), HttpFetcher(), parallel=2, floor=floor)
    assert report.seconds > floor.window_s  # judged, and kept
    assert all((report.path / path).read_bytes() == data for path, data in files.items())
