"""Peer copy routes: nodes of one datacenter copy weights from each other under tickets (sdk/wire/peers.py).

Like the heartbeat, they carry no API key: each proves the calling node with its own secret
(`X-Berth-Node-Secret`), and no node ever sees another's. B asks for a ticket and reports its copy; A checks
a ticket presented to it before it serves a byte. Every refusal names the field (ticket, sha256, model, bytes).
"""

from __future__ import annotations

from fastapi import APIRouter, status

from sdk.wire.peers import PeerTicket, PeerTicketRequest, ReportAnswer, TicketCheck, TicketGrant, TransferReport

from .errors import ERROR_RESPONSES
from .nodes import NodeId, NodeSecret, _call
from .services import Svc

router = APIRouter(tags=["fleet"], responses=ERROR_RESPONSES)


@router.post(
    "/v1/nodes/{node_id}/peer-tickets",
    status_code=status.HTTP_201_CREATED,
    response_model=PeerTicket,
    responses={
        403: {"description": "the node does not run the model's engine"},
        404: {"description": "no peer of the node's datacenter serves the model"},
        429: {"description": "the node was minted its limit of tickets in the last minute"},
    },
)
async def mint_ticket(node_id: NodeId, req: PeerTicketRequest, svc: Svc, node_secret: NodeSecret = None) -> PeerTicket:
    """A ticket for `node_id` to copy `req.model`'s weights from the fastest peer of its datacenter that holds them
    (shown once; only its hash is kept)."""
    entry = await svc.db(svc.store.models.get, req.model)
    return await _call(svc, svc.store.peers.mint, node_id, node_secret, req, entry.entry if entry else None)


@router.post(
    "/v1/nodes/{node_id}/peer-tickets/check",
    response_model=TicketGrant,
    responses={403: {"description": "the ticket does not let this node serve that file"}},
)
async def check_ticket(node_id: NodeId, chk: TicketCheck, svc: Svc, node_secret: NodeSecret = None) -> TicketGrant:
    """May `node_id` serve file `chk.sha256` to whoever presented `chk.ticket`?"""
    return await _call(svc, svc.store.peers.check, node_id, node_secret, chk)


@router.post(
    "/v1/nodes/{node_id}/peer-tickets/report",
    response_model=ReportAnswer,
    responses={409: {"description": "the ticket's copy was reported already"}},
)
async def report_copy(node_id: NodeId, rep: TransferReport, svc: Svc, node_secret: NodeSecret = None) -> ReportAnswer:
    """How the copy under a ticket went; closes the ticket. A corrupt or unservable copy is held against its source."""
    return await _call(svc, svc.store.peers.report, node_id, node_secret, rep)
