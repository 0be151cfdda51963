"""The LLM step's bookkeeping from a GPU node: the control plane's step routes over HTTP.

A node agent has no database. The LLM step activity it runs is the one the control queue runs
(activities/llm_step.py), handed this class as its `StepBooks`: each method is one POST, so a
normal step costs two round trips (prepare, settle). The client is synchronous because the
activity calls its books through `asyncio.to_thread`, as it does the store's.

Refusals raise `StepBooksRefused` with the status and the control plane's message. A 401 or
404 may stop after the node registers again (the control plane lost its database, or the
node's secret was reset); any other 4xx is a request that will never be accepted (`permanent`).
A control plane that cannot be reached or answers 5xx is asked again for up to a minute (it is
restarting), then the error propagates.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx

from sdk import CheckpointRef
from sdk.wire.contracts import PendingStep
from sdk.wire.fleet import NODE_SECRET_HEADER
from sdk.wire.ledger import DeadTokens, LedgerEntry
from sdk.wire.step_books import (
    BookedRequest,
    BookInterruptedRequest,
    DeadAttemptBody,
    LedgerEntryBody,
    PreparedStepBody,
    PrepareStepRequest,
    SettleStepRequest,
    SettleStepResult,
)
from sdk.wire.step_call import CallReport, PreparedStep, Settled, StepRef

from .control_plane import ControlPlaneError, _message

_TRANSIENT_4XX = frozenset({401, 404, 408, 429})
# A control plane restarting (`berth up` restarts a killed server in seconds; a rolling update takes longer) is
# waited for this long, at a growing pause, while the step keeps heartbeating.
RETRY_FOR_S = 60.0
RETRY_FIRST_S, RETRY_MAX_S = 0.25, 5.0


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
    """Implements activities.step.ports.StepBooks over `POST /v1/nodes/{node_id}/steps/...`.

    `node_secret` is called for every request, so a node that re-registers (and gets its
    secret back) is picked up without rebuilding the books; None sends no secret (refused).
    `transport` lets tests run the real app in-process.
    """

    def __init__(
        self,
        api_url: str,
        node_id: str,
        node_secret: Callable[[], str | None],
        timeout_s: float = 30,
        transport: httpx.BaseTransport | None = None,
        retry_for_s: float = RETRY_FOR_S,
    ) -> None:
        self.api_url = api_url.rstrip("/")
        self.node_id = node_id
        self._node_secret = node_secret
        self._http = httpx.Client(base_url=self.api_url, timeout=timeout_s, transport=transport)
        self.retry_for_s = retry_for_s

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RemoteStepBooks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def prepare(
        self,
        step: StepRef,
        checkpoint: CheckpointRef,
        pending: PendingStep | None,
        instructions: str | None = None,
        tools: list[dict[str, Any]] | None = None,
        *,
        attempt: int = 1,
    ) -> PreparedStep:
        if pending is not None:
            raise ValueError(
                f"step {step.step} of task {step.task_id!r} reached a node with its predecessor unwritten;"
                " a node never writes a task's steps"
            )
        body = PreparedStepBody.model_validate(
            self._post(
                "prepare",
                PrepareStepRequest(
                    lease_id=_lease(step),
                    attempt=attempt,
                    checkpoint=checkpoint,
                    instructions=instructions,
                    tools=tools or [],
                ),
                f"preparing step {step.step} of task {step.task_id!r}",
            )
        )
        return PreparedStep(checkpoint=body.checkpoint, messages=body.messages, max_tokens=body.max_tokens)

    def settle(self, step: StepRef, call: CallReport) -> Settled:
        answer = SettleStepResult.model_validate(
            self._post(
                "settle",
                SettleStepRequest(
                    lease_id=_lease(step),
                    attempt=call.attempt,
                    prompt_tokens=call.prompt_tokens,
                    completion_tokens=call.completion_tokens,
                    continued_tokens=call.continued_tokens,
                    ttft_s=call.ttft_s,
                    duration_s=call.duration_s,
                    response_id=call.response_id,
                    finish_reason=call.finish_reason,
                    tool_calls=list(call.tool_calls),
                    placement=call.placement,
                ),
                f"settling step {step.step} of task {step.task_id!r}",
            )
        )
        return Settled(recorded=answer.recorded, cost_usd=answer.cost_usd)

    def booked(self, step: StepRef, before_attempt: int) -> list[LedgerEntry]:
        answer = self._post(
            "booked",
            BookedRequest(lease_id=_lease(step), before_attempt=before_attempt),
            f"reading what step {step.step} of task {step.task_id!r} booked",
        )
        return [LedgerEntry(**LedgerEntryBody.model_validate(e).model_dump()) for e in answer]

    def book_interrupted(self, step: StepRef, dead: list[DeadTokens]) -> None:
        if dead:
            self._post(
                "interrupted",
                BookInterruptedRequest(
                    lease_id=_lease(step),
                    entries=[
                        DeadAttemptBody.model_validate({"attempt": d.attempt, "kind": d.kind, "tokens": d.tokens})
                        for d in dead
                    ],
                ),
                f"booking the tokens of interrupted attempts of step {step.step} of task {step.task_id!r}",
            )

    def _post(self, route: str, request: Any, what: str) -> Any:
        """One POST, sent again while the control plane is unreachable or failing (a restart) for up to
        `retry_for_s`: every step route is idempotent, and giving up on a settle would lose a reply the engine
        already wrote (the step is placed again, maybe on a node whose engine cannot replay it)."""
        body = request.model_dump(mode="json")
        deadline = time.monotonic() + self.retry_for_s
        pause = RETRY_FIRST_S
        while True:
            secret = self._node_secret()
            headers = {NODE_SECRET_HEADER: secret} if secret else {}
            try:
                response = self._http.post(f"/v1/nodes/{self.node_id}/steps/{route}", json=body, headers=headers)
            except httpx.TransportError:
                if time.monotonic() + pause > deadline:
                    raise
            else:
                if response.is_success:
                    return response.json() if response.status_code != 204 else None
                if response.status_code < 500 or time.monotonic() + pause > deadline:
                    raise StepBooksRefused(what, response)
            time.sleep(pause)
            pause = min(pause * 2, RETRY_MAX_S)


def _lease(step: StepRef) -> str:
    if not step.lease_id:
        raise ValueError(f"step {step.step} of task {step.task_id!r} carries no lease; a node books only leased steps")
    return step.lease_id
