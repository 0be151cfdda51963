"""The node's side of the control plane's peer-ticket routes (orchestrator/api/peers.py), as this node.

Used by both ends of a copy: the fetching node mints a ticket and reports how its copy went; the serving
node checks each ticket presented to it. Every call carries this node's own secret, and only to the control
plane; a peer only ever sees a ticket.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import httpx

from sdk.wire.fleet import NODE_SECRET_HEADER
from sdk.wire.peers import PeerTicket, PeerTicketRequest, ReportAnswer, TicketCheck, TicketGrant, TransferReport

from .control_plane import _message


class NoPeer(RuntimeError):
    """No peer of this node's datacenter can serve the model (or the control plane would not say): use origin."""


class TicketRefused(RuntimeError):
    """The control plane refused a ticket check; `status` is its HTTP status (403: the ticket does not allow it)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class PeerTickets:
    """Mint, check and report peer tickets as node `node_id`; `secret` is read at each call (it may change)."""

    def __init__(
        self,
        api_url: str,
        node_id: str,
        secret: Callable[[], str | None],
        timeout_s: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.node_id = node_id
        self._secret = secret
        self._http = httpx.AsyncClient(base_url=api_url.rstrip("/"), timeout=timeout_s, transport=transport)

    async def close(self) -> None:
        await self._http.aclose()

    async def mint(self, model: str, exclude: Sequence[str] = ()) -> PeerTicket:
        """A ticket to copy `model` from a peer not in `exclude`; `NoPeer` when there is none (or no answer)."""
        body = PeerTicketRequest(model=model, exclude_nodes=list(exclude)).model_dump(mode="json")
        try:
            response = await self._post("peer-tickets", body)
        except httpx.HTTPError as exc:
            raise NoPeer(f"the control plane did not answer a peer ticket for {model}: {exc}") from exc
        if response.status_code != 201:
            raise NoPeer(f"no peer ticket for {model}: {_message(response)}")
        return PeerTicket.model_validate(response.json())

    async def check(self, ticket: str, sha256: str) -> TicketGrant:
        """Whether this node may serve file `sha256` to `ticket`'s holder; `TicketRefused` if not."""
        response = await self._post("peer-tickets/check", TicketCheck(ticket=ticket, sha256=sha256).model_dump())
        if response.status_code != 200:
            raise TicketRefused(_message(response), response.status_code)
        return TicketGrant.model_validate(response.json())

    async def report(self, report: TransferReport) -> ReportAnswer | None:
        """Say how a copy went; None when the control plane did not take it (the ticket expires unreported)."""
        try:
            response = await self._post("peer-tickets/report", report.model_dump(mode="json"))
        except httpx.HTTPError:
            return None
        return ReportAnswer.model_validate(response.json()) if response.status_code == 200 else None

    async def _post(self, route: str, body: dict) -> httpx.Response:
        return await self._http.post(
            f"/v1/nodes/{self.node_id}/{route}", json=body, headers={NODE_SECRET_HEADER: self._secret() or ""}
        )
