"""Settling a step's lease, as pure functions: what the release tells the pool, and the step's result as the ledger
booked it (never as the node's reply says). fleet_step.py issues the release and reads the booked round back."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from sdk import CheckpointRef
    from sdk.wire.contracts import Reply, Shortfall
    from sdk.wire.lease import BookedRound, NextStep, Placed, ReleaseLease, StepPlacement, StepRound
    from sdk.wire.tool_names import ASK_HUMAN_TOOL, SPAWN_AGENT_TOOL

    from .fleet_outcomes import Failed, Generation, Interrupted
    from .fleet_round import Round


def release_of(rnd: Round, grant: Placed, placement: StepPlacement | None, outcome: Generation | None) -> ReleaseLease:
    """The lease's release: warm when it served, gone when its load failed or its node lost the replica, and what the
    step does next (told to the pool with the release, so that the next step finds its replica warm)."""
    served = isinstance(outcome, (Reply, Shortfall))
    gone = (
        placement is None
        and isinstance(outcome, (Interrupted, Failed))  # its load failed
        or isinstance(outcome, Interrupted)
        and outcome.interruption.replica_gone
    )
    return ReleaseLease(
        lease_id=grant.lease_id,
        replica_warm=served,
        replica_gone=gone,
        booked_round=StepRound(task_id=rnd.inp.task_id, step=rnd.inp.step, first_attempt=rnd.first_attempt)
        if served
        else None,
        next_step=next_step_of(outcome) if isinstance(outcome, Reply) else None,
    )


def settled(
    rnd: Round,
    grant: Placed,
    placement: StepPlacement | None,
    outcome: Reply | Shortfall | Interrupted | Failed,
    booked: BookedRound | None,
) -> Reply | Shortfall | Interrupted | Failed:
    """The step's result as the ledger booked it (never as the node says); a node that answered without booking the
    call failed the step (a node to stop trusting with it). An interruption or a failure stays what it is."""
    if not isinstance(outcome, (Reply, Shortfall)):
        return outcome
    charged = as_booked(outcome, booked or BookedRound(), rnd.inp.checkpoint, placement)
    if charged is None:
        return Failed(None, "books", f"{grant.node_id} answered step {rnd.inp.step} without booking the call")
    return charged


def as_booked(
    reply: Reply | Shortfall, booked: BookedRound, checkpoint: CheckpointRef, placement: StepPlacement | None
) -> Reply | Shortfall | None:
    """The node's reply with the figures the ledger booked for the step's round in place of the node's own, the
    checkpoint this step sent, and where it ran; None for a reply whose call the node never booked."""
    if isinstance(reply, Shortfall):  # no call was made: whatever the round booked was for dead attempts
        return reply.model_copy(
            update={
                "kept_tokens": booked.kept_tokens,
                "cost_usd": booked.cost_usd,
                "lost_tokens": booked.tokens - booked.kept_tokens,
                "checkpoint": checkpoint,
                "placement": placement,
            }
        )
    if booked.settled_calls == 0:
        return None
    return reply.model_copy(
        update={
            "prompt_tokens": booked.prompt_tokens,
            "completion_tokens": booked.completion_tokens,
            "lost_tokens": booked.lost_tokens,
            "kept_tokens": booked.kept_tokens,
            "cost_usd": booked.cost_usd,
            "checkpoint": checkpoint,
            "placement": placement,
        }
    )


def next_step_of(reply: Reply) -> NextStep | None:
    """What the task does before its next step, told to the pool with the release (no extra round trip) so
    that the step finds its replica warm: it runs tools, starts sub-agents, or waits for a human. A reply
    without tool calls is the task's answer: no step follows."""
    calls = reply.tool_calls
    if not calls:
        return None
    if any(c.name == ASK_HUMAN_TOOL for c in calls):
        return NextStep(kind="awaiting_input")
    spawns = sum(1 for c in calls if c.name == SPAWN_AGENT_TOOL)
    return NextStep(kind="spawn", spawns=spawns) if spawns else NextStep(kind="tool_calls")
