"""The node agent's HTTP client for the control plane: join the fleet, then heartbeat.

Why the errors are split as they are: a refused join token will never start working, so the
agent stops with one clear line; a control plane that is not up yet (both started by the same
`berth up`, or a rolling restart) will, so connection errors are retried for a while; a join
refused because the list of nodes waiting for approval is full (429) waits for the place the
answer names; a heartbeat whose secret is refused (the control plane lost its database, or
dropped the node after it waited too long for approval: it answers both like a wrong secret, so
strangers cannot map node ids) means the node must join again, under the same id and secret; and
a heartbeat refused as revoked (told only to the node that held the secret) is what no retry
undoes: the agent stops, with one clear line.
"""

from __future__ import annotations

import asyncio
import logging
import time

import httpx

from sdk.wire.fleet import NODE_SECRET_HEADER, NodeHeartbeat, NodeRegistered, NodeRegistration, NodeView

log = logging.getLogger("berth.node.control_plane")


class ControlPlaneError(RuntimeError):
    """The control plane refused a request for a reason retrying will not change."""


class JoinRefused(ControlPlaneError):
    """The join token (or the node secret for an id already taken) was refused."""


class NodeUnknown(ControlPlaneError):
    """The control plane does not know this node (any more): register again."""


class CredentialRefused(ControlPlaneError):
    """The control plane refused the node's secret: the node was revoked, and must be admitted again."""


class ControlPlaneUnreachable(ControlPlaneError):
    """No answer from the control plane within the wait allowed."""


# How long a join refused for a full approval list waits at most before it asks again: the answer's
# Retry-After says when the oldest waiting node is dropped, but an operator may approve or remove one sooner.
_FULL_LIST_RETRY_MAX_S = 60.0


def _code(response: httpx.Response) -> str | None:
    try:
        body = response.json()
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    return error.get("code") if isinstance(error, dict) else None


def _retry_after_s(response: httpx.Response) -> float:
    try:
        return min(max(float(response.headers.get("retry-after", "")), 1.0), _FULL_LIST_RETRY_MAX_S)
    except ValueError:
        return _FULL_LIST_RETRY_MAX_S


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
        error = body.get("error", body) if isinstance(body, dict) else {}
        message = error.get("message") or error.get("detail") or response.text
    except ValueError:
        message = response.text
    return f"{response.status_code}: {message}"


class ControlPlane:
    """Register and heartbeat over HTTP; `transport` lets tests run the real app in-process."""

    def __init__(
        self, api_url: str, timeout_s: float = 10.0, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self.api_url = api_url.rstrip("/")
        self._http = httpx.AsyncClient(base_url=self.api_url, timeout=timeout_s, transport=transport)

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> ControlPlane:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def register(
        self,
        registration: NodeRegistration,
        node_secret: str | None = None,
        wait_s: float = 60.0,
        retry_every_s: float = 1.0,
    ) -> NodeRegistered:
        """Join (or rejoin with `node_secret`), retrying connection errors for up to `wait_s`, and a full list of
        nodes waiting for approval until a place frees (the node is let in as soon as one does)."""
        headers = {NODE_SECRET_HEADER: node_secret} if node_secret else {}
        deadline = time.monotonic() + wait_s
        while True:
            try:
                response = await self._http.post(
                    "/v1/nodes/register", json=registration.model_dump(mode="json"), headers=headers
                )
            except httpx.TransportError as exc:
                if time.monotonic() >= deadline:
                    raise ControlPlaneUnreachable(
                        f"control plane at {self.api_url} did not answer within {wait_s:.0f}s: {exc}"
                    ) from exc
                log.info("control plane at %s not reachable yet (%s); retrying", self.api_url, exc)
                await asyncio.sleep(retry_every_s)
                continue
            if response.status_code in (200, 201):
                return NodeRegistered.model_validate(response.json())
            if response.status_code == 401:
                raise JoinRefused(
                    f"the control plane refused to let node {registration.node_id!r} join: {_message(response)}"
                )
            if response.status_code == 429:
                log.warning("node %r cannot join yet: %s", registration.node_id, _message(response))
                await asyncio.sleep(_retry_after_s(response))
                continue
            if response.status_code == 409:
                raise JoinRefused(
                    f"node id {registration.node_id!r} is taken: {_message(response)}; "
                    "give this node another --node-id, or its own cache dir's node-secret"
                )
            if response.status_code >= 500 and time.monotonic() < deadline:
                await asyncio.sleep(retry_every_s)  # a control plane still opening its store
                continue
            raise ControlPlaneError(f"registration of node {registration.node_id!r} refused: {_message(response)}")

    async def heartbeat(self, beat: NodeHeartbeat, node_secret: str) -> NodeView:
        """Send one heartbeat; `NodeUnknown` when the control plane does not take the node's secret (it forgot the
        node, or never knew it: the node joins again), `CredentialRefused` when it says the node was revoked.

        Connection errors propagate: the agent's loop logs them and tries at the next beat.
        """
        response = await self._http.post(
            f"/v1/nodes/{beat.node_id}/heartbeat",
            json=beat.model_dump(mode="json"),
            headers={NODE_SECRET_HEADER: node_secret},
        )
        if response.status_code == 200:
            return NodeView.model_validate(response.json())
        if response.status_code == 404 or (response.status_code == 401 and _code(response) != "revoked"):
            raise NodeUnknown(f"the control plane does not know node {beat.node_id!r}: {_message(response)}")
        if response.status_code == 401:
            raise CredentialRefused(
                f"the control plane refused the credential of node {beat.node_id!r}, so the"
                f" node stops: {_message(response)}"
            )
        raise ControlPlaneError(f"heartbeat of node {beat.node_id!r} refused: {_message(response)}")
