"""The LLM step's bookkeeping from a GPU node: the control plane's step routes over HTTP.

A node agent has no database. The LLM step activity it runs is the one the control queue runs
(activities/llm_step.py), handed this class as its `StepBooks`: each method is one POST, so a
normal step costs two round trips (prepare, settle). The client is synchronous because the
activity calls its books through `asyncio.to_thread`, as it does the store's.

Refusals raise `StepBooksRefused` with the status and the control plane's message. A 401 or
404 may stop after the node registers again (the control plane lost its database, or the
node's secret was reset), and 5xx may pass; any other 4xx is a request that will never be
accepted (`permanent`). Connection errors propagate as httpx's, for Temporal to retry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import httpx

from activities.ports import LedgerEntry, PreparedStep
from sdk import CheckpointRef
from sdk._fleet import NODE_SECRET_HEADER
from sdk._step_books import (
    BookedRequest,
    BookInterruptedRequest,
    LedgerEntryBody,
    PreparedStepBody,
    PrepareStepRequest,
    SettleStepRequest,
    SettleStepResult,
)
from sdk.contracts import PendingStep

from .control_plane import ControlPlaneError, _message

_TRANSIENT_4XX = frozenset({401, 404, 408, 429})


class StepBooksRefused(ControlPlaneError):
    """The control plane answered a step's bookkeeping with an error status."""

    def __init__(self, what: str, response: httpx.Response) -> None:
        self.status = response.status_code
        self.message = _message(response)
        super().__init__(f"{what} refused by the control plane: {self.message}")

    @property
    def permanent(self) -> bool:
        """True for a refusal that no retry (nor re-registration) will change."""
        return 400 <= self.status < 500 and self.status not in _TRANSIENT_4XX


class RemoteStepBooks:
    """Implements activities.ports.StepBooks over `POST /v1/nodes/{node_id}/steps/...`.

    `node_secret` is called for every request, so a node that re-registers (and gets its
    secret back) is picked up without rebuilding the books; None sends no secret (refused).
    `transport` lets tests run the real app in-process.
    """

    def __init__(self, api_url: str, node_id: str, node_secret: Callable[[], str | None], timeout_s: float = 30,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.api_url = api_url.rstrip("/")
        self.node_id = node_id
        self._node_secret = node_secret
        self._http = httpx.Client(base_url=self.api_url, timeout=timeout_s, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RemoteStepBooks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def prepare(self, task_id: str, checkpoint: CheckpointRef, pending: PendingStep | None) -> PreparedStep:
        body = PreparedStepBody.model_validate(self._post(
            "prepare", PrepareStepRequest(task_id=task_id, checkpoint=checkpoint, pending=pending),
            f"preparing step of task {task_id!r}"))
        return PreparedStep(checkpoint=body.checkpoint, messages=body.messages)

    def settle(self, entry: LedgerEntry, event: dict) -> bool:
        answer = self._post("settle", SettleStepRequest(entry=_body(entry), event=event),
                            f"settling step {entry.step} of task {entry.task_id!r}")
        return SettleStepResult.model_validate(answer).recorded

    def booked(self, task_id: str, step: int, before_attempt: int) -> list[LedgerEntry]:
        answer = self._post("booked", BookedRequest(task_id=task_id, step=step, before_attempt=before_attempt),
                            f"reading what step {step} of task {task_id!r} booked")
        return [LedgerEntry(**LedgerEntryBody.model_validate(e).model_dump()) for e in answer]

    def book_interrupted(self, entries: list[LedgerEntry]) -> None:
        if entries:
            self._post("interrupted", BookInterruptedRequest(entries=[_body(e) for e in entries]),
                       f"booking the tokens of interrupted attempts of task {entries[0].task_id!r}")

    def _post(self, route: str, request: Any, what: str) -> Any:
        secret = self._node_secret()
        headers = {NODE_SECRET_HEADER: secret} if secret else {}
        response = self._http.post(f"/v1/nodes/{self.node_id}/steps/{route}", json=request.model_dump(mode="json"),
                                   headers=headers)
        if not response.is_success:
            raise StepBooksRefused(what, response)
        return response.json() if response.status_code != 204 else None


def _body(entry: LedgerEntry) -> LedgerEntryBody:
    return LedgerEntryBody(**dataclasses.asdict(entry))
