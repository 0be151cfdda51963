"""The model call of a leased step, run on the node that holds the replica.

The node runs the very activity the control queue runs (`activities.llm_step`), with two
things swapped in: its bookkeeping goes through the control plane's step routes (the node has
no database), and its route is the leased replica's local server. Around each call the
replica's load is counted (leases and tokens still to generate), so the node's heartbeat
reports real load to the pool. When the node is told to leave (SIGTERM, a preemption notice)
its generations stop at once and report the text they had written: the step continues from it
on another node straight away, instead of racing the notice here.
"""

from __future__ import annotations

import asyncio
import time

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.llm_step import LlmStepActivities
from activities.step.ports import ReplicaUnavailable
from activities.step.tokens import warm_up_counting
from sdk.wire.contracts import GENERATE_ACTIVITY, LlmStepInput, LlmStepResult
from sdk.wire.lease import StepPlacement
from sdk.wire.step_call import ModelRoute

from ..tokenizers import ModelTokenizers
from .replicas import ReplicaManager
from .step_books import StepBooksRefused

GENERATE = GENERATE_ACTIVITY


def warm_up() -> None:
    """Import litellm and load its tokenizer (seconds of CPU) before the first step arrives.

    Done inside the first generation it would stall the node's event loop past the step's
    heartbeat timeout, and the workflow would take the node for lost.
    """
    warm_up_counting()


class ReplicaRouter:
    """Routes a leased step to its replica on this node (activities.step.ports.ModelRouter)."""

    def __init__(self, node_id: str, replicas: ReplicaManager, tokenizers: ModelTokenizers | None = None) -> None:
        self.node_id = node_id
        self.replicas = replicas
        self.tokenizers = tokenizers

    def route(self, model: str, placement: StepPlacement | None) -> ModelRoute:
        if placement is None:
            raise ValueError(f"node {self.node_id} serves only leased steps; this one carries no placement")
        replica = self.replicas.get(placement.replica_id)
        if replica is None or replica.state != "warm" or replica.handle is None:
            raise ReplicaUnavailable(f"replica {placement.replica_id} of {model} is not serving on node {self.node_id}")
        entry = replica.entry
        return ModelRoute(
            name=model,
            litellm_model=entry.litellm_route or f"hosted_vllm/{model}",
            api_base=replica.handle.base_url,
            api_key="berth-node",
            usd_per_1m_prompt=entry.usd_per_1m_prompt,
            usd_per_1m_completion=entry.usd_per_1m_completion,
            served_by=f"{self.node_id}/{replica.replica_id}",
            # Counted as the control plane counts it (the model's own tokenizer), once loaded; routing runs on the
            # event loop, so a tokenizer still loading leaves this step to litellm's count, within the plane's grant.
            tokenizer=self.tokenizers.ready(entry) if self.tokenizers is not None else None,
            openai_compatible=True,
        )


class NodeGeneration:
    def __init__(self, llm: LlmStepActivities, replicas: ReplicaManager) -> None:
        self.llm = llm
        self.replicas = replicas

    @activity.defn(name=GENERATE)
    async def generate(self, inp: LlmStepInput) -> LlmStepResult:
        replica = self.replicas.get(inp.placement.replica_id) if inp.placement is not None else None
        if replica is not None:
            replica.generation_started(time.monotonic())
            replica.outstanding_tokens += inp.max_tokens
        stop_at_shutdown = asyncio.create_task(_cut_at_worker_shutdown(asyncio.current_task()))
        try:
            return await self.llm.generate(inp)
        except StepBooksRefused as exc:
            if exc.permanent:  # e.g. the lease is gone: retrying on this node is refused the same way
                raise ApplicationError(str(exc), type="StepBooksRefused", non_retryable=True) from exc
            raise
        finally:
            stop_at_shutdown.cancel()
            if replica is not None:
                replica.generation_ended(time.monotonic())
                replica.outstanding_tokens -= inp.max_tokens


async def _cut_at_worker_shutdown(generation: asyncio.Task | None) -> None:
    """Cancel the generation when the node's worker starts shutting down; the LLM step then reports
    what it had written as a NodeStopping interruption (activities/llm_step.py)."""
    await activity.wait_for_worker_shutdown()
    if generation is not None:
        generation.cancel()
