"""The "datacenter" source of the weights cache: a revision's files copied from a peer of this node's datacenter.

One copy, in order (`fill_from_peers`):
1. ask the control plane for a ticket (`PeerTickets.mint`): it names the peer (the fastest measured one that
   reports the model and is not held back by a dispute) and the files, each with its sha256 and size;
2. fill the cache from that peer through `PeerFetcher`, one more `WeightsFetcher` of the fetch layer: the fill
   (`weights_fill`) writes `partial/<sha256>`, hashes as the bytes arrive, resumes a cut transfer with
   `Range: bytes=N-`, and never admits a file whose bytes do not hash to the catalogue's sha256;
3. a peer whose file failed the hash (`corrupt`), which sent slower than the transfer floor over its window
   (`stalled`, with the bytes and seconds measured), or which does not hold or cannot serve what it reports
   (`unservable`), is reported to the control plane and the copy is tried from another peer (the ticket
   request names the ones tried); what the fill verified so far stays, so the next peer sends only the rest;
   with no peer left, `NoPeer` says to fetch from origin;
4. a verified copy is reported with its bytes and seconds: the pool learns this peer's rate from it.

A ticket the control plane refused at the peer (401/403), or a peer that could not ask it (503), is no
fault of the peer's claim: the copy moves on without a dispute, and the ticket expires unreported.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx

from sdk.wire.peers import PEER_FILES_PATH, PEER_TICKET_HEADER, PeerTicket, TransferOutcome, TransferReport

from ..weights.fetchers import SourceTier, Transfer, WeightsFetchError, http_transfer
from ..weights.fetchers.http import TIMEOUT
from ..weights.files import Revision, RevisionFile, WeightsIntegrityError
from ..weights.floor import TransferFloor, TransferStalled
from .peer_tickets import NoPeer, PeerTickets
from .weights_cache import WeightsCache
from .weights_fill import FillReport, fill_revision

log = logging.getLogger("berth.node.peers")

# Peers tried for one copy before origin: the first and two others; a datacenter where three holders in a row
# fail the hash has a problem origin will not share.
MAX_PEERS = 3
# Statuses with which a peer says the control plane refused (or could not check) the ticket there.
_TICKET_REFUSED = (401, 403, 503)


class PeerFetcher:
    """Files of one ticket's revision from its source node's peer server (`peer_server.py`)."""

    tier: SourceTier = "datacenter"

    def __init__(self, ticket: PeerTicket, client: httpx.Client | None = None) -> None:
        self.ticket = ticket
        self._client = client
        self._lock = threading.Lock()
        self.last_status: int | None = None  # of the last answer that was not bytes; None: none came

    def url_of(self, revision: Revision, file: RevisionFile) -> str:
        return f"{self.ticket.peer_url}{PEER_FILES_PATH}/{file.sha256} (peer {self.ticket.source_node})"

    def client(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                self._client = httpx.Client(timeout=TIMEOUT)
            return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    @contextmanager
    def open(self, revision: Revision, file: RevisionFile, offset: int) -> Iterator[Transfer]:
        url = f"{self.ticket.peer_url}{PEER_FILES_PATH}/{file.sha256}"
        with http_transfer(
            self.client(),
            url,
            offset,
            {PEER_TICKET_HEADER: self.ticket.ticket},
            named=self.url_of(revision, file),
            refused=self._refused,
        ) as transfer:
            yield transfer

    def _refused(self, response: httpx.Response) -> str:
        self.last_status = response.status_code
        try:
            response.read()  # a refusal is a short JSON body
            return str(response.json()["error"]["message"])
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return ""

    def outcome_of(self, exc: Exception) -> TransferOutcome | None:
        """What a failed fill says about the peer's claim: None when the ticket, not the peer, was at fault."""
        if isinstance(exc, WeightsIntegrityError):
            return "corrupt"
        if isinstance(exc, TransferStalled):
            return "stalled"
        if self.last_status in _TICKET_REFUSED or "HTTP 503" in str(exc):
            return None
        return "unservable"  # a 404 for a file it reports, or a port it names where nothing serves


async def fill_from_peers(
    cache: WeightsCache,
    revision: Revision,
    tickets: PeerTickets,
    *,
    stop: threading.Event | None = None,
    on_bytes: Callable[[int], None] | None = None,
    max_peers: int = MAX_PEERS,
    floor: TransferFloor | None = None,
) -> FillReport:
    """Fill `revision` into `cache` from datacenter peers (see the module docstring); `NoPeer` when none gave a
    verified copy. The room must be reserved (`cache.ensure_revision`); on `NoPeer` it stays reserved for the
    origin fetch that follows, and what the peers verified stays in the cache's blobs."""
    tried: list[str] = []
    failures: list[str] = []
    for _ in range(max_peers):
        try:
            ticket = await tickets.mint(revision.model, tried)
        except NoPeer as exc:  # none (left) in this datacenter
            raise NoPeer("; ".join([*failures, str(exc)])) from None
        fetcher = PeerFetcher(ticket)
        try:
            report = await asyncio.to_thread(
                fill_revision, cache, revision, fetcher, stop=stop, on_bytes=on_bytes, floor=floor
            )
        except (WeightsIntegrityError, WeightsFetchError) as exc:
            outcome = fetcher.outcome_of(exc)
            log.warning(
                "copy of %s from peer %s failed (%s): %s; trying another source",
                revision.model,
                ticket.source_node,
                outcome or "ticket refused there",
                exc,
            )
            if outcome is not None:
                await tickets.report(_failure_report(ticket, outcome, exc))
            tried.append(ticket.source_node)
            failures.append(f"{ticket.source_node}: {exc}")
            continue
        finally:
            fetcher.close()
        await tickets.report(
            TransferReport(
                ticket=ticket.ticket,
                outcome="verified",
                bytes=report.bytes_fetched,
                seconds=round(max(report.seconds, 1e-3), 6),
            )
        )
        return report
    raise NoPeer(f"{len(tried)} peer(s) failed to copy {revision.model}: " + "; ".join(failures))


def _failure_report(ticket: PeerTicket, outcome: TransferOutcome, exc: Exception) -> TransferReport:
    """A failed copy's report with its evidence: a stall's measurement (bytes received over the floor's window),
    a corrupt copy's file."""
    if isinstance(exc, TransferStalled):
        return TransferReport(
            ticket=ticket.ticket,
            outcome=outcome,
            bytes=exc.bytes_in_window,
            seconds=exc.window_s,
            reason=str(exc)[:500],
        )
    sha256 = exc.sha256 if isinstance(exc, WeightsIntegrityError) else None  # the file whose bytes were refused
    return TransferReport(ticket=ticket.ticket, outcome=outcome, sha256=sha256, reason=str(exc)[:500])
