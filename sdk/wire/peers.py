"""Weights copied between nodes of one datacenter, as the nodes and the control plane exchange it.

A node never shows another node its own secret. Node B, short of a model's weights, asks the control
plane (as B) for a `PeerTicket`: a random, short-lived credential bound to B, to one source node A of
B's datacenter that reports the model in its heartbeats, and to the digests of that model's files. B
presents it to A's peer server (`PEER_TICKET_HEADER`); A asks the control plane (as A) whether it may
serve that file to that ticket (`TicketCheck`) before sending a byte. B checks every file's sha256 as
it arrives and tells the control plane how the copy went (`TransferReport`): a verified copy is a
measured sample of A's serving rate, a corrupt, stalled or unservable one is evidence against A's claim.

`TransferSample` is what a node measured of its own disk and origin reads; it rides on heartbeats. A
peer sample rides only on a report, bound to a ticket the control plane issued, so no node can make up
a peer's rate without a transfer the control plane authorised.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from .catalogue import SHA256, WeightsFile
from .limits import MAX_REASON_CHARS, MAX_STORED_INT, NAME_PATTERN, numbers_not_booleans

PEER_TICKET_HEADER = "X-Berth-Peer-Ticket"
PEER_FILES_PATH = "/v1/peer/files"  # + "/<sha256>" on a node's peer server
# A ticket is random (32 bytes, urlsafe base64: 43 characters); anything far longer is not one.
TICKET_PATTERN = r"^[A-Za-z0-9_-]{16,128}$"
# Lives 15 minutes by default: a 140 GiB model at a 2.5 GiB/s datacenter link is ~1 min, at a congested
# 250 MiB/s ~10 min; an hour at most (then the copy asks again), 10 s at least (a start takes that long).
DEFAULT_TICKET_TTL_S = 900
MIN_TICKET_TTL_S = 10
MAX_TICKET_TTL_S = 3600
# A node asking again after a failed copy names the sources it already tried; 16 covers a rack.
MAX_EXCLUDED_SOURCES = 16
# Ticket-bound samples and heartbeat samples alike: a week for one transfer is past any real copy, and
# 1e-3 s is below any timer that could measure one.
MAX_TRANSFER_S = 7 * 86_400
MIN_TRANSFER_S = 1e-3
# The fastest transfer a node may report: 200 GB/s, beyond a 1.6 Tbit/s NIC or eight NVMe drives striped. A
# faster claim is a lie or a clock error, and would make one tier win every decision.
MAX_BYTES_PER_S = 200e9


def plausible_transfer(size: int, seconds: float) -> bool:
    """Whether a measured transfer is one to learn from: some bytes, a measurable time, a possible rate."""
    return size > 0 and seconds >= MIN_TRANSFER_S and size / seconds <= MAX_BYTES_PER_S


TransferOutcome = Literal["verified", "corrupt", "stalled", "unservable"]
SampleTier = Literal["disk", "origin"]

_STRICT = ConfigDict(extra="forbid")


class PeerTicketRequest(BaseModel):
    """Node B asks for a ticket to copy `model`'s weights from a peer of its datacenter."""

    model_config = _STRICT

    model: str = Field(min_length=1, max_length=128)
    exclude_nodes: list[Annotated[str, Field(pattern=NAME_PATTERN)]] = Field(
        default_factory=list, max_length=MAX_EXCLUDED_SOURCES, description="sources already tried for this copy"
    )
    ttl_s: int = Field(default=DEFAULT_TICKET_TTL_S, ge=MIN_TICKET_TTL_S, le=MAX_TICKET_TTL_S)

    _numbers = numbers_not_booleans("ttl_s")


class PeerTicket(BaseModel):
    """A ticket to copy one model's files from `source_node`; shown once (only its hash is kept)."""

    ticket: str
    source_node: str
    peer_url: str = Field(description="the source's peer server, e.g. http://10.0.0.7:7070")
    model: str
    files: list[WeightsFile]
    expires_at: datetime


class TicketCheck(BaseModel):
    """Node A asks whether a ticket presented to it lets it serve the file `sha256`."""

    model_config = _STRICT

    ticket: str = Field(pattern=TICKET_PATTERN)
    sha256: str = Field(pattern=SHA256)


class TicketGrant(BaseModel):
    """A may serve this file of `model` to `dest_node` (until `expires_at`)."""

    dest_node: str
    model: str
    file: WeightsFile
    expires_at: datetime


class TransferReport(BaseModel):
    """How B's copy under a ticket went; it closes the ticket (a second report, or any use after, is refused)."""

    model_config = _STRICT

    ticket: str = Field(pattern=TICKET_PATTERN)
    outcome: TransferOutcome
    bytes: int = Field(
        default=0,
        ge=0,
        le=MAX_STORED_INT,
        description="bytes received and verified; for a stalled copy, bytes received in the last `seconds`",
    )
    seconds: float = Field(
        default=0.0,
        ge=0,
        le=MAX_TRANSFER_S,
        allow_inf_nan=False,
        description="the copy's duration; for a stalled copy, the floor's window the rate was measured over",
    )
    sha256: str | None = Field(default=None, pattern=SHA256, description="the file that failed, if one did")
    reason: str | None = Field(default=None, max_length=MAX_REASON_CHARS)

    _numbers = numbers_not_booleans("bytes", "seconds")


class TransferSample(BaseModel):
    """A node's own measured read: `bytes` from its disk or from the model's origin in `seconds`."""

    model_config = _STRICT

    tier: SampleTier
    bytes: int = Field(gt=0, le=MAX_STORED_INT)
    seconds: float = Field(ge=MIN_TRANSFER_S, le=MAX_TRANSFER_S, allow_inf_nan=False)

    _numbers = numbers_not_booleans("bytes", "seconds")


class ReportAnswer(BaseModel):
    """What the control plane made of a report: whether it recorded a rate, and whether it stopped believing
    the source's claim of the model."""

    recorded_sample: bool
    disputed: bool = Field(
        description="the report counted against the source: it showed evidence the control plane saw"
    )
    held_back: bool = Field(
        default=False, description="enough nodes' reports now hold the source back: no tickets from it for a while"
    )
    not_counted: str | None = Field(default=None, description="why a failure report counted for nothing")
