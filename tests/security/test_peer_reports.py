"""A node's report against a peer buys nothing it did not earn (issue 34, item 4).

Played against the control plane's store, as the routes call it (`tests/api/test_peer_weights.py` plays whole copies
over real HTTP): one `corrupt` report with no bytes fetched took the only honest holder of a model out of peer
service for 10 minutes, repeatable without limit. Now a report counts only on what the control plane saw under its
ticket, one reporter alone never holds a source back, and a reporter whose reports do not count or are refuted
loses the right to report. Tickets, which reports ride on, go only to nodes a load of the model was placed on (a
pool's replica reservation, an operator's pre-warm) and that run its engine, a few a minute.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlmodel import Session

from orchestrator.store import Store
from orchestrator.store.peer_evidence import REPORT_STRIKES
from orchestrator.store.peers import TICKETS_PER_MINUTE, PeerTicketRefused
from orchestrator.store.tables import GpuReservationRow
from sdk import Conflict
from sdk.wire.catalogue import ModelEntry, WeightsFile, WeightsSource
from sdk.wire.fleet import NodeHeartbeat, NodeSpec
from sdk.wire.peers import PeerTicket, PeerTicketRequest, TicketCheck, TransferReport

DATA = b"honest weights" * 1000
SHA = hashlib.sha256(DATA).hexdigest()


def secret(node: str) -> str:
    return f"secret-of-{node}-{'x' * 16}"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    store = Store.open(f"sqlite:///{tmp_path}/berth.db")
    store.models.put(
        ModelEntry(
            name="tiny",
            engine="vllm",
            weights_gib=len(DATA) / 2**30,
            weights=WeightsSource(
                origin=tmp_path.as_uri(), files=[WeightsFile(path="w.gguf", sha256=SHA, size_bytes=len(DATA))]
            ),
        )
    )
    for node in ("holder", "liar", "liar-2", "honest-1", "honest-2", "honest-3"):
        store.fleet.register(
            NodeSpec(node_id=node, datacenter="dc-1", zone="dc-1-a", capacity="on-demand"), secret(node)
        )
        place(store, node)
    store.fleet.heartbeat(
        NodeHeartbeat(
            node_id="holder", peer_port=7070, peer_host="127.0.0.1", cached_weights=[{"model": "tiny", "size_bytes": 1}]
        ),
        secret("holder"),
    )
    yield store
    store.close()


def place(store: Store, node: str) -> None:
    """A load of tiny placed on `node` by a pool: its GPU reservation, as the pool writes it before the load."""
    with Session(store.engine) as session:
        session.add(
            GpuReservationRow(
                replica_id=f"tiny-on-{node}",
                node_id=node,
                model="tiny",
                gpu_indexes_json="[0]",
                per_device_gib=1.0,
                pool_id="pool-1",
            )
        )
        session.commit()


def ticket(store: Store, node: str) -> PeerTicket:
    entry = store.models.get("tiny")
    assert entry is not None
    return store.peers.mint(node, secret(node), PeerTicketRequest(model="tiny"), entry.entry)


def served(store: Store, t: PeerTicket) -> None:
    """The holder was asked for the file under `t`: its peer server checked the ticket before sending a byte."""
    store.peers.check("holder", secret("holder"), TicketCheck(ticket=t.ticket, sha256=SHA))


def report(store: Store, node: str, t: PeerTicket, outcome: str, **kw: object):  # noqa: ANN201 — a ReportAnswer
    return store.peers.report(node, secret(node), TransferReport(ticket=t.ticket, outcome=outcome, **kw))  # type: ignore[arg-type]


def in_service(store: Store) -> bool:
    view = store.fleet.get("holder")
    return (
        view is not None
        and "tiny" in [w.model for w in view.cached_weights]
        and ("holder", "tiny") not in store.peers.disputed()
        and ticket(store, "honest-3").source_node == "holder"
    )


def test_a_corrupt_report_with_no_bytes_fetched_counts_for_nothing_however_often(store: Store) -> None:
    for _ in range(20):  # today: the first one held the holder back for 10 minutes
        answer = report(store, "liar", ticket(store, "liar"), "corrupt", sha256=SHA)
        assert not answer.disputed and answer.not_counted is not None
        assert in_service(store)


def test_a_stall_without_a_measured_rate_counts_for_nothing(store: Store) -> None:
    t = ticket(store, "liar")
    served(store, t)
    answer = report(store, "liar", t, "stalled")  # no bytes over no seconds: no measurement
    assert not answer.disputed and "at least" in (answer.not_counted or "")
    assert in_service(store)


def test_one_reporter_with_bytes_fetched_makes_the_only_holder_suspect_not_out(store: Store) -> None:
    t = ticket(store, "liar")
    served(store, t)  # the liar really fetched the file, then says it failed the hash
    answer = report(store, "liar", t, "corrupt", sha256=SHA)
    assert answer.disputed and not answer.held_back
    assert in_service(store)  # the only holder still serves: one node's word is not enough


def test_a_reporter_whose_reports_are_refuted_loses_the_right_to_report(store: Store) -> None:
    for honest in ("honest-1", "honest-2")[:REPORT_STRIKES]:
        t = ticket(store, "liar")
        served(store, t)
        assert report(store, "liar", t, "corrupt", sha256=SHA).disputed
        v = ticket(store, honest)  # another node copies from the holder, verified: the liar's report is refuted
        served(store, v)
        assert not report(store, honest, v, "verified", bytes=len(DATA), seconds=0.01).disputed
    t = ticket(store, "liar")
    served(store, t)
    answer = report(store, "liar", t, "corrupt", sha256=SHA)  # evidence or not: its word counts no more
    assert not answer.disputed and "may not report" in (answer.not_counted or "")
    # and a second liar's report is no corroboration of a refuted one
    t2 = ticket(store, "liar-2")
    served(store, t2)
    assert not report(store, "liar-2", t2, "corrupt", sha256=SHA).held_back
    assert in_service(store)


def test_two_nodes_that_fetched_bad_bytes_hold_the_source_back(store: Store) -> None:
    for node in ("honest-1", "honest-2"):
        t = ticket(store, node)
        served(store, t)
        answer = report(store, node, t, "corrupt", sha256=SHA, reason="sha256 mismatch")
    assert answer.held_back and ("holder", "tiny") in store.peers.disputed()
    view = store.fleet.get("holder")
    assert view is not None and "tiny" not in [w.model for w in view.cached_weights]


def test_a_node_gets_no_ticket_for_a_model_whose_engine_it_does_not_run(store: Store) -> None:
    store.fleet.register(
        NodeSpec(node_id="vllm-only", datacenter="dc-1", zone="dc-1-a", capacity="on-demand", engines=["vllm"]),
        secret("vllm-only"),
    )
    store.fleet.register(
        NodeSpec(node_id="cpu-node", datacenter="dc-1", zone="dc-1-a", capacity="on-demand", engines=["llama.cpp"]),
        secret("cpu-node"),
    )
    for node in ("vllm-only", "cpu-node"):
        place(store, node)
    assert ticket(store, "vllm-only").source_node == "holder"  # tiny is a vllm model
    with pytest.raises(PeerTicketRefused, match="engine") as refused:
        ticket(store, "cpu-node")  # today: a ticket all the same
    assert refused.value.field == "model"


def test_tickets_are_rate_limited_per_node(store: Store) -> None:
    for _ in range(TICKETS_PER_MINUTE):
        ticket(store, "liar")
    with pytest.raises(Conflict, match="last minute") as limited:
        ticket(store, "liar")  # today: 200 in 1.3 s
    assert limited.value.status_code == 429
    assert ticket(store, "honest-1").source_node == "holder"  # another node's own limit


def test_a_node_gets_no_ticket_for_a_model_no_load_placed_on_it(store: Store) -> None:
    store.fleet.register(
        NodeSpec(node_id="idle", datacenter="dc-1", zone="dc-1-a", capacity="on-demand"), secret("idle")
    )
    with pytest.raises(PeerTicketRefused, match="no load of 'tiny' is placed") as refused:
        ticket(store, "idle")  # today: a ticket, and a report to file with it
    assert refused.value.field == "model"
    store.peers.order_weights("idle", "tiny")  # an operator's pre-warm places it
    assert ticket(store, "idle").source_node == "holder"
