"""An own loop's own trace, tied to its task: the loop's trace id recorded on the task, and Berth's spans of its
calls made part of that trace.

An Agents SDK run has a trace (`trace_<32 hex>`) in the SDK's trace viewer; Berth's spans of the same task go to
OpenTelemetry. The loop records its trace id as a task event (`loop_trace`), so a person reading the task finds
the run's trace; and each of its requests carries a W3C `traceparent` naming that trace, which `TraceParent`
makes the current context of the request: the Temporal client's interceptor then starts the workflow update's
spans (and the workflow's, the generation's below them) in the loop's trace id.
"""

from __future__ import annotations

from fastapi import APIRouter, status
from opentelemetry import context, propagate
from pydantic import ConfigDict
from starlette.types import ASGIApp, Receive, Scope, Send

from sdk.wire import task_events

from .auth import TaskWriter
from .errors import ERROR_RESPONSES
from .services import Svc
from .tasks import require_running

router = APIRouter(prefix="/v1/tasks", tags=["own loop"], responses=ERROR_RESPONSES)

LOOP_TRACE_EVENT = task_events.LoopTraceEvent.KIND


class LoopTrace(task_events.LoopTrace):
    """The request: the `loop_trace` event's own fields, and nothing else."""

    model_config = ConfigDict(extra="forbid")


@router.post("/{task_id}/loop-trace", status_code=status.HTTP_204_NO_CONTENT)
async def record_trace(task_id: str, body: LoopTrace, svc: Svc, caller: TaskWriter) -> None:
    """Record the trace of a run of the task's own loop (each run, a re-run after a crash too, has its own)."""
    record = await svc.task_record(task_id, caller)
    require_running(record)
    await svc.db(svc.store.events.append, task_id, LOOP_TRACE_EVENT, body.model_dump(exclude_none=True))


_PROPAGATED = (b"traceparent", b"tracestate")


class TraceParent:
    """A request's W3C trace context (when it sends one) as the current OpenTelemetry context while it is served."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        carrier = (
            {
                name.decode("latin-1"): value.decode("latin-1")
                for name, value in scope.get("headers") or ()
                if name in _PROPAGATED
            }
            if scope["type"] == "http"
            else {}
        )
        if "traceparent" not in carrier:
            await self.app(scope, receive, send)
            return
        token = context.attach(propagate.extract(carrier))
        try:
            await self.app(scope, receive, send)
        finally:
            context.detach(token)
