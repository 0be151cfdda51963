"""Weights copied between nodes of a datacenter, end to end over real HTTP on loopback ports chosen at run time.

The control plane is the real app on uvicorn (its own thread); each node is a real weights cache of real files
with its real peer server (orchestrator/node/peer_server.py); copies go through the fetch layer
(`fill_from_peers` over `weights_fill`). The nodes join through the store's primitive (`fleet.register`): how a
node is admitted is tests/api/test_api_nodes.py's. No Temporal: the gateway points at a closed port.
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
import uvicorn

from orchestrator.api import TemporalGateway
from orchestrator.config import BerthConfig
from orchestrator.node.peer_fetch import fill_from_peers
from orchestrator.node.peer_server import CacheBlobs, PeerServer
from orchestrator.node.peer_tickets import NoPeer, PeerTickets
from orchestrator.node.weights_cache import WeightsCache
from orchestrator.node.weights_fill import fill_revision
from orchestrator.server import create_app
from orchestrator.store import Store
from orchestrator.store.peers import DISPUTE_HOLD_S
from orchestrator.store.tables import PeerDisputeRow, utcnow
from orchestrator.weights.fetchers import origin_fetcher
from orchestrator.weights.files import Revision
from orchestrator.weights.floor import TransferFloor
from sdk.wire.catalogue import ModelEntry, WeightsFile, WeightsSource
from sdk.wire.fleet import NodeHeartbeat, NodeSpec
from sdk.wire.peers import PEER_FILES_PATH, PEER_TICKET_HEADER, PeerTicketRequest

MIB = 2**20


class ApiServer:
    """The control-plane app on a loopback port, on its own thread and event loop."""

    def __init__(self, app: object) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    def __enter__(self) -> ApiServer:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            assert self._thread.is_alive() and time.monotonic() < deadline, "the API did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()


@dataclass
class Node:
    node_id: str
    secret: str
    cache: WeightsCache
    tickets: PeerTickets
    server: PeerServer | None = None
    port: int | None = None  # what its heartbeats name (the peer server's, or a proxy's)

    async def close(self) -> None:
        if self.server is not None:
            await self.server.stop()
        await self.tickets.close()


@dataclass
class Fleet:
    store: Store
    api_url: str
    tmp: Path
    nodes: dict[str, Node] = field(default_factory=dict)

    async def node(self, node_id: str, datacenter: str = "dc-1", serve: bool = True, capacity: int = 64 * MIB) -> Node:
        secret = f"secret-of-{node_id}-{'x' * 16}"
        self.store.fleet.register(
            NodeSpec(node_id=node_id, datacenter=datacenter, zone=f"{datacenter}-a", capacity="on-demand"), secret
        )
        for model in ("tiny", "big"):  # a load of each is placed on it: it may ask for tickets (store/peers.py)
            self.store.peers.order_weights(node_id, model)
        cache = WeightsCache(self.tmp / node_id, capacity)
        node = Node(node_id, secret, cache, PeerTickets(self.api_url, node_id, lambda: secret))
        if serve:
            node.server = PeerServer(CacheBlobs(cache), node.tickets)
            await node.server.start()
            node.port = node.server.port
        self.nodes[node_id] = node
        return node

    def heartbeat(self, node: Node, models: list[str] | None = None) -> None:
        """What `node` reports: the models its cache holds (or `models`, true or not), and its peer port."""
        held = models if models is not None else [w.model for w in node.cache.contents()]
        self.store.fleet.heartbeat(
            NodeHeartbeat(
                node_id=node.node_id,
                peer_port=node.port,
                peer_host="127.0.0.1",
                cached_weights=[{"model": m, "size_bytes": 1} for m in held],
            ),
            node.secret,
        )

    def claims(self, node: Node) -> list[str]:
        view = self.store.fleet.get(node.node_id)
        assert view is not None
        return [w.model for w in view.cached_weights]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    store = Store.open(f"sqlite:///{tmp_path}/berth.db")
    yield store
    store.close()


@pytest.fixture
async def fleet(tmp_path: Path, store: Store, closed_port: int) -> AsyncIterator[Fleet]:
    config = BerthConfig(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path}/berth.db")
    app = create_app(config, store, TemporalGateway(f"127.0.0.1:{closed_port}"))
    with ApiServer(app) as api:
        fleet = Fleet(store, api.url, tmp_path)
        yield fleet
        for node in fleet.nodes.values():
            await node.close()


def model_entry(root: Path, name: str, files: dict[str, bytes]) -> ModelEntry:
    """A catalogue entry whose weights are `files`, written under `root` (its file:// origin)."""
    listed = []
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
        listed.append(WeightsFile(path=path, sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data)))
    return ModelEntry(
        name=name,
        engine="vllm",
        weights_gib=sum(len(d) for d in files.values()) / 2**30,
        weights=WeightsSource(origin=root.as_uri(), files=listed),
    )


def generated(seed: int, size: int) -> bytes:
    return hashlib.sha256(str(seed).encode()).digest() * (size // 32)


@pytest.fixture
def tiny(tmp_path: Path, store: Store) -> Revision:
    entry = model_entry(
        tmp_path / "origin-tiny",
        "tiny",
        {"model.gguf": generated(1, 3 * MIB), "tokenizer.json": generated(2, 64 * 1024)},
    )
    store.models.put(entry)
    revision = Revision.of(entry)
    assert revision is not None
    return revision


def from_origin(node: Node, revision: Revision) -> None:
    node.cache.ensure_revision(revision, "origin")
    fill_revision(node.cache, revision, origin_fetcher(revision))


async def from_peers(node: Node, revision: Revision):  # noqa: ANN201 — a FillReport
    node.cache.ensure_revision(revision, "datacenter")
    return await fill_from_peers(node.cache, revision, node.tickets)


def blob_bytes(node: Node, revision: Revision) -> bytes:
    return b"".join(node.cache.store.blob_path(f.sha256).read_bytes() for f in revision.files)


async def test_a_peer_copy_is_verified_by_hash_and_teaches_the_pool_the_peers_rate(
    fleet: Fleet, tiny: Revision
) -> None:
    a, b = await fleet.node("node-a"), await fleet.node("node-b", serve=False)
    from_origin(a, tiny)
    fleet.heartbeat(a)

    report = await from_peers(b, tiny)

    assert report.tier == "datacenter" and report.bytes_fetched == tiny.size_bytes
    assert b.cache.has_revision(tiny.digest) and blob_bytes(b, tiny) == blob_bytes(a, tiny)
    [sample] = fleet.store.peers.samples_after(0)
    assert (sample.node_id, sample.tier, sample.source_node, sample.bytes) == (
        "node-b",
        "datacenter",
        "node-a",
        tiny.size_bytes,
    )


async def test_a_corrupt_copy_is_refused_the_copy_taken_from_another_peer_and_a_second_reporter_holds_the_source_back(
    fleet: Fleet, tiny: Revision
) -> None:
    a, c = await fleet.node("node-a"), await fleet.node("node-c")
    b, d = await fleet.node("node-b", serve=False), await fleet.node("node-d", serve=False)
    for node in (a, c):
        from_origin(node, tiny)
    # node-a's copy of the GGUF rots on disk: same size, other bytes (and node-a is the faster peer by record).
    blob = a.cache.store.blob_path(tiny.files[0].sha256)
    data = bytearray(blob.read_bytes())
    data[MIB] ^= 0xFF
    blob.write_bytes(bytes(data))
    fleet.heartbeat(a)
    fleet.heartbeat(c)
    _record_fast(fleet, source="node-a")

    report = await from_peers(b, tiny)

    assert report.tier == "datacenter"
    assert blob_bytes(b, tiny) == blob_bytes(c, tiny)  # node-c's, verified; node-a's bytes never entered
    # One node's word, with the file it was served: node-a is suspect (asked after node-c, faster or not), not out.
    assert "tiny" in fleet.claims(a) and ("node-a", "tiny") not in fleet.store.peers.disputed()
    assert (await d.tickets.mint("tiny")).source_node == "node-c"
    fleet.heartbeat(c, models=[])  # node-c goes: node-a, suspect, is the only peer left

    with pytest.raises(NoPeer, match="node-a"):
        await from_peers(d, tiny)  # a second node finds the same: held back now

    assert "tiny" not in fleet.claims(a)  # dropped from what node-a reports ...
    fleet.heartbeat(a)
    assert "tiny" in fleet.claims(a)  # ... until its next heartbeat reports it again,
    with pytest.raises(NoPeer):  # but it is no peer source of tiny for the dispute's hold
        await b.tickets.mint("tiny", exclude=["node-c"])
    later = utcnow() + timedelta(seconds=DISPUTE_HOLD_S + 1)
    ticket = fleet.store.peers.mint(
        "node-b",
        b.secret,
        PeerTicketRequest(model="tiny", exclude_nodes=["node-c"]),
        fleet.store.models.get("tiny").entry,
        now=later,
    )
    assert ticket.source_node == "node-a"


def _record_fast(fleet: Fleet, source: str) -> None:
    from sqlmodel import Session

    from orchestrator.store.tables import TransferSampleRow

    with Session(fleet.store.engine) as session:
        session.add(
            TransferSampleRow(node_id="node-x", tier="datacenter", source_node=source, bytes=10**10, seconds=1.0)
        )
        session.commit()


class CuttingProxy:
    """A TCP proxy to a peer server that cuts, once, the first connection to pass `cut_after` bytes of answer, and keeps
    what the fetching node sent (so a test can see its requests, and that no node secret was among them)."""

    def __init__(self, target_port: int, cut_after: int) -> None:
        self.target_port, self.cut_after = target_port, cut_after
        self.sent = bytearray()
        self.connections = 0
        self.cut = False
        self._server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)

        async def upstream() -> None:
            while data := await reader.read(65536):
                self.sent.extend(data)
                up_writer.write(data)
                await up_writer.drain()

        async def downstream() -> None:
            passed = 0
            while data := await up_reader.read(65536):
                if not self.cut and passed + len(data) > self.cut_after:
                    self.cut = True
                    writer.write(data[: self.cut_after - passed])
                    await writer.drain()
                    writer.transport.abort()  # a reset, mid-body
                    return
                passed += len(data)
                writer.write(data)
                await writer.drain()
            writer.close()

        up = asyncio.create_task(upstream())
        try:
            await downstream()
        finally:
            up.cancel()
            up_writer.close()


async def test_a_cut_copy_resumes_with_range_and_no_node_secret_crosses_to_the_peer(
    fleet: Fleet, tiny: Revision
) -> None:
    a, b = await fleet.node("node-a"), await fleet.node("node-b", serve=False)
    from_origin(a, tiny)
    assert a.server is not None
    proxy = CuttingProxy(a.server.port, cut_after=MIB + 12_345)
    await proxy.start()
    a.port = proxy.port  # peers reach node-a through the proxy
    fleet.heartbeat(a)
    try:
        b.cache.ensure_revision(tiny, "datacenter")
        report = await fill_from_peers(b.cache, tiny, b.tickets)
    finally:
        await proxy.stop()

    assert b.cache.has_revision(tiny.digest) and blob_bytes(b, tiny) == blob_bytes(a, tiny)
    requests = bytes(proxy.sent).decode("latin-1").lower()
    assert (
        proxy.cut and "range: bytes=" in requests and proxy.connections >= 2
    )  # resumed on a new connection, from its prefix
    assert report.bytes_fetched == tiny.size_bytes  # the prefix was not sent twice
    assert a.secret.lower() not in requests and b.secret.lower() not in requests
    assert "x-berth-node-secret" not in requests


async def _get(node: Node, sha256: str, ticket: str) -> httpx.Response:
    assert node.server is not None
    async with httpx.AsyncClient(base_url=node.server.url) as http:
        return await http.get(f"{PEER_FILES_PATH}/{sha256}", headers={PEER_TICKET_HEADER: ticket})


async def test_a_ticket_for_another_node_another_entry_expired_or_replayed_is_refused(
    fleet: Fleet, tiny: Revision, tmp_path: Path
) -> None:
    other = model_entry(tmp_path / "origin-other", "other", {"w.bin": generated(9, 2 * MIB)})
    fleet.store.models.put(other)
    a, c = await fleet.node("node-a"), await fleet.node("node-c")
    b = await fleet.node("node-b", serve=False)
    for node in (a, c):
        from_origin(node, tiny)
        other_rev = Revision.of(other)
        assert other_rev is not None
        from_origin(node, other_rev)
    fleet.heartbeat(a)
    _record_fast(fleet, source="node-a")  # so the ticket names node-a
    gguf = tiny.files[0].sha256

    ticket = await b.tickets.mint("tiny")
    assert ticket.source_node == "node-a"
    assert (await _get(a, gguf, ticket.ticket)).status_code == 200  # the ticket works where it is meant to

    wrong_node = await _get(c, gguf, ticket.ticket)
    assert wrong_node.status_code == 403 and "another source node" in wrong_node.json()["error"]["message"]
    wrong_entry = await _get(a, other.weights.files[0].sha256, ticket.ticket)
    assert wrong_entry.status_code == 403 and "not a file of 'tiny'" in wrong_entry.json()["error"]["message"]
    no_ticket = await _get(a, gguf, "")
    assert no_ticket.status_code == 401 and no_ticket.json()["error"]["field"] == "ticket"

    expired = fleet.store.peers.mint(
        "node-b",
        b.secret,
        PeerTicketRequest(model="tiny", ttl_s=10),
        fleet.store.models.get("tiny").entry,
        now=utcnow() - timedelta(seconds=11),
    )
    refused = await _get(a, gguf, expired.ticket)
    assert refused.status_code == 403 and "expired" in refused.json()["error"]["message"]

    from sdk.wire.peers import TransferReport

    assert (
        await b.tickets.report(
            TransferReport(ticket=ticket.ticket, outcome="verified", bytes=tiny.size_bytes, seconds=0.5)
        )
        is not None
    )
    replayed = await _get(a, gguf, ticket.ticket)
    assert replayed.status_code == 403 and "used up" in replayed.json()["error"]["message"]
    assert await b.tickets.report(TransferReport(ticket=ticket.ticket, outcome="verified")) is None  # 409 once closed

    async with httpx.AsyncClient(base_url=fleet.api_url) as http:  # node-c cannot report node-b's copy
        answer = await http.post(
            "/v1/nodes/node-c/peer-tickets/report",
            json={"ticket": ticket.ticket, "outcome": "corrupt"},
            headers={"X-Berth-Node-Secret": c.secret},
        )
        assert answer.status_code == 403
        bounded = await http.post(
            "/v1/nodes/node-b/peer-tickets",
            json={"model": "tiny", "ttl_s": 10**9},
            headers={"X-Berth-Node-Secret": b.secret},
        )
        assert bounded.status_code == 422 and "ttl_s" in bounded.text
        stranger = await http.post(
            "/v1/nodes/node-b/peer-tickets", json={"model": "tiny"}, headers={"X-Berth-Node-Secret": a.secret}
        )
        assert stranger.status_code == 401  # node-a's secret is not node-b's


async def test_a_node_claiming_an_entry_it_cannot_serve_is_found_out_and_the_copy_comes_from_origin(
    fleet: Fleet, tiny: Revision
) -> None:
    a, b = await fleet.node("node-a"), await fleet.node("node-b", serve=False)
    e = await fleet.node("node-e", serve=False)
    fleet.heartbeat(a, models=["tiny"])  # node-a's cache is empty: the claim is false

    with pytest.raises(NoPeer, match="node-a"):
        await from_peers(b, tiny)
    assert "tiny" in fleet.claims(a)  # one report, though node-a was reached: suspect, not out
    e.cache.ensure_revision(tiny, "datacenter")
    with pytest.raises(NoPeer, match="node-a"):
        await fill_from_peers(e.cache, tiny, e.tickets)  # a second node finds it out too: held back
    assert "tiny" not in fleet.claims(a)
    fleet.heartbeat(a, models=["tiny"])  # claimed again at once: still not believed as a source
    with pytest.raises(NoPeer, match="no peer"):
        await b.tickets.mint("tiny")

    report = await asyncio.to_thread(fill_revision, b.cache, tiny, origin_fetcher(tiny))  # the room stayed reserved
    assert report.tier == "origin" and b.cache.has_revision(tiny.digest)


async def test_an_evicted_entry_is_reloaded_from_a_peer(fleet: Fleet, tiny: Revision, tmp_path: Path) -> None:
    big = model_entry(tmp_path / "origin-big", "big", {"big.bin": generated(5, 4 * MIB)})
    fleet.store.models.put(big)
    big_rev = Revision.of(big)
    assert big_rev is not None
    a = await fleet.node("node-a")
    b = await fleet.node("node-b", serve=False, capacity=5 * MIB)  # tiny (3.06 MiB) and big (4 MiB) do not fit at once
    from_origin(a, tiny)
    fleet.heartbeat(a)
    await from_peers(b, tiny)
    from_origin(b, big_rev)  # evicts tiny
    assert not b.cache.has_revision(tiny.digest) and b.cache.used_bytes() <= 5 * MIB

    report = await from_peers(b, tiny)  # evicts big, copies tiny again from node-a

    assert report.tier == "datacenter" and b.cache.has_revision(tiny.digest)
    assert not b.cache.has_revision(big_rev.digest) and b.cache.used_bytes() <= 5 * MIB


class TricklingProxy:
    """A TCP proxy to a peer server that passes its answers on a few bytes at a time: a peer that stalls a load while
    never staying silent long enough for a read to time out (issue 34: 1 KiB every 50 s, a load held 481 s+)."""

    def __init__(self, target_port: int, piece: int, every_s: float) -> None:
        self.target_port, self.piece, self.every_s = target_port, piece, every_s
        self._server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)

        async def upstream() -> None:
            while data := await reader.read(65536):
                up_writer.write(data)
                await up_writer.drain()

        up = asyncio.create_task(upstream())
        try:
            while data := await up_reader.read(self.piece):
                writer.write(data)
                await writer.drain()
                await asyncio.sleep(self.every_s)
        except ConnectionError:
            pass  # the fetching node gave up on us
        finally:
            up.cancel()
            up_writer.close()
            writer.close()


async def test_a_peer_that_trickles_is_abandoned_within_the_floors_window_reported_and_the_copy_taken_elsewhere(
    fleet: Fleet, tiny: Revision
) -> None:
    a, c = await fleet.node("node-a"), await fleet.node("node-c")
    b = await fleet.node("node-b", serve=False)
    for node in (a, c):
        from_origin(node, tiny)
    assert a.server is not None
    proxy = TricklingProxy(a.server.port, piece=1024, every_s=0.25)  # 4 KiB/s, a read never waits
    await proxy.start()
    a.port = proxy.port
    fleet.heartbeat(a)
    fleet.heartbeat(c)
    _record_fast(fleet, source="node-a")  # node-a is asked first
    floor = TransferFloor(bytes_per_s=MIB, window_s=5.0)  # the shortest window a node may set (and report)

    b.cache.ensure_revision(tiny, "datacenter")
    began = time.monotonic()
    try:
        # Without a floor the copy would take ~13 min at 4 KiB/s; 60 s is the test's own patience.
        report = await asyncio.wait_for(fill_from_peers(b.cache, tiny, b.tickets, floor=floor), timeout=60)
    finally:
        await proxy.stop()
    took = time.monotonic() - began

    assert report.tier == "datacenter" and blob_bytes(b, tiny) == blob_bytes(c, tiny)  # node-c's, verified
    assert took < 5.0 + 10.0, took  # the window, plus at most one read (fetchers.http.READ_S)
    [dispute] = _disputes(fleet)  # reported, with the rate measured: node-a is asked after node-c from now on
    assert (dispute.node_id, dispute.reported_by, dispute.outcome) == ("node-a", "node-b", "stalled")
    assert dispute.reason is not None and "below the floor" in dispute.reason
    [sample] = fleet.store.peers.samples_after(0)[-1:]
    assert sample.source_node == "node-c"
    d = await fleet.node("node-d", serve=False)
    assert (await d.tickets.mint("tiny")).source_node == "node-c"


async def test_a_lone_stalling_peer_sends_the_load_to_origin_after_its_window(fleet: Fleet, tiny: Revision) -> None:
    a, b = await fleet.node("node-a"), await fleet.node("node-b", serve=False)
    from_origin(a, tiny)
    assert a.server is not None
    proxy = TricklingProxy(a.server.port, piece=1024, every_s=0.25)
    await proxy.start()
    a.port = proxy.port
    fleet.heartbeat(a)

    b.cache.ensure_revision(tiny, "datacenter")
    began = time.monotonic()
    try:
        with pytest.raises(NoPeer, match="stalled"):
            await asyncio.wait_for(
                fill_from_peers(b.cache, tiny, b.tickets, floor=TransferFloor(bytes_per_s=MIB, window_s=2.0)),
                timeout=60,
            )
    finally:
        await proxy.stop()
    assert time.monotonic() - began < 12.0
    # what ReplicaManager does next: the origin, into the room the peers' attempt reserved
    report = await asyncio.to_thread(fill_revision, b.cache, tiny, origin_fetcher(tiny))
    assert report.tier == "origin" and b.cache.has_revision(tiny.digest)


def _disputes(fleet: Fleet) -> list[PeerDisputeRow]:
    from sqlmodel import Session, select

    with Session(fleet.store.engine) as session:
        return list(session.exec(select(PeerDisputeRow)).all())
