"""A generation's heartbeats: the typed progress they carry, on a clock as well as on tokens.

A node killed without notice loses what the last heartbeat that reached Temporal did not carry, so
progress is beaten twice a second while tokens stream (a node's worker sends every one: its heartbeat
throttle is HEARTBEAT_EVERY_S, orchestrator/node/agent.py). Before the first token (bookkeeping, a long
prefill) and on a stalled stream a beat every 2 s keeps the step alive: without one the workflow would
ask whether the node is gone.
"""

from __future__ import annotations

import asyncio

from temporalio import activity

from sdk.wire.attempts import Attempts

HEARTBEAT_EVERY_S = 0.5
ALIVE_EVERY_S = 2.0


def beat(progress: Attempts) -> None:
    activity.heartbeat(progress.progress())


async def keep_beating(progress: Attempts) -> None:
    """Heartbeat progress as it grows, and at least every ALIVE_EVERY_S while it does not."""
    sent, quiet = progress.generated, 0.0
    while True:
        await asyncio.sleep(HEARTBEAT_EVERY_S)
        quiet += HEARTBEAT_EVERY_S
        if progress.generated != sent or quiet >= ALIVE_EVERY_S:
            beat(progress)
            sent, quiet = progress.generated, 0.0
