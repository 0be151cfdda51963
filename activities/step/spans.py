"""What Berth knows about a step, written onto the span the Temporal interceptor opened for its activity.

Activities never create or configure tracing: the TracingInterceptor on the worker makes a span per
activity, current while it runs, and these helpers annotate that span. Without a configured provider
the current span is the API's non-recording one and each call returns at once.
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.util.types import AttributeValue

from sdk.wire.contracts import CheckpointRef
from sdk.wire.lease import LeaseGrant, LeaseRequest, Placed, StepPlacement, Wait
from sdk.wire.task_events import Interruption

INTERRUPTION_EVENT = "berth.interruption"
# The fields of an Interruption its span event carries.
INTERRUPTION_KEYS = {"step", "kind", "node_id", "replica_id", "tokens_kept", "tokens_lost", "resumed_on", "resume_s"}


def _annotate(attributes: dict[str, AttributeValue]) -> None:
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attributes({k: v for k, v in attributes.items() if v is not None})  # OTel refuses None


def annotate_acquire(req: LeaseRequest, grant: LeaseGrant) -> None:
    """The placement decision and the score term that decided it."""
    attributes: dict[str, AttributeValue] = {
        "berth.task_id": req.task_id,
        "berth.step": req.step,
        "berth.model": req.model,
        "berth.tenant": req.tenant,
        "berth.lease.outcome": grant.outcome,
    }
    if isinstance(grant, Placed):
        attributes.update(
            {
                "berth.node": grant.node_id,
                "berth.replica": grant.replica_id,
                "berth.tier": grant.tier,
                "berth.decided_by": grant.decided_by,
                "berth.capacity": grant.capacity,
                "berth.zone": grant.zone,
                "berth.load": grant.load is not None,
            }
        )
    elif isinstance(grant, Wait):
        attributes.update({"berth.wait_reason": grant.wait_reason, "berth.queue_position": grant.queue_position})
    _annotate(attributes)


def annotate_generation(
    task_id: str,
    step: int,
    model: str,
    placement: StepPlacement | None,
    ttft_s: float,
    prompt_tokens: int,
    completion_tokens: int,
    duration_s: float,
) -> None:
    """Where the step generated and how fast: the figures an agent's user waits on."""
    _annotate(
        {
            "berth.task_id": task_id,
            "berth.step": step,
            "berth.model": model,
            "berth.node": placement.node_id if placement else None,
            "berth.replica": placement.replica_id if placement else None,
            "berth.tier": placement.tier if placement else None,
            "berth.ttft_s": ttft_s,
            "berth.prompt_tokens": prompt_tokens,
            "berth.completion_tokens": completion_tokens,
            "berth.tokens_per_s": completion_tokens / duration_s if duration_s > 0 else None,
        }
    )


def annotate_load(model: str, replica_id: str, gpu_indexes: list[int], tier: str, load_seconds: float) -> None:
    """A replica started for a step: where its weights came from and how long the step waited for them."""
    _annotate(
        {
            "berth.model": model,
            "berth.replica": replica_id,
            "berth.gpu_indexes": gpu_indexes,
            "berth.tier": tier,
            "berth.load_s": load_seconds,
        }
    )


def annotate_checkpoint(task_id: str, ref: CheckpointRef) -> None:
    _annotate({"berth.task_id": task_id, "berth.checkpoint.seq": ref.seq})


def record_cut(kind: str, placement: StepPlacement | None, generated_tokens: int) -> None:
    """This generation was cut off (node stopping, preemption): its span says by what and where."""
    _annotate(
        {
            "berth.interruption.kind": kind,
            "berth.node": placement.node_id if placement else None,
            "berth.interruption.generated_tokens": generated_tokens,
        }
    )


def record_interruption(cut: Interruption) -> None:
    """The workflow's record of an interruption once its step is placed again (workflows/fleet_step.py):
    by what, where, the tokens kept and lost and the node it resumed on, as an event in the task's trace."""
    span = trace.get_current_span()
    if span.is_recording():
        span.add_event(
            INTERRUPTION_EVENT,
            {
                f"berth.{key}": value
                for key, value in cut.model_dump(include=INTERRUPTION_KEYS).items()
                if value is not None
            },
        )
