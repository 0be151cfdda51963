"""The LLM call of a step, in one activity: resume, route, reserve, generate, settle.

    resume     what earlier attempts of the step left (their heartbeats): tokens to book, text to continue
    route      which engine serves the model here (a node's leased replica, or the configured engine)
    reserve    count the prompt and size max_tokens to what the allowance pays for (step_plan.py)
    generate   stream the reply, heartbeating typed progress (heartbeats.py, model_stream.py)
    settle     book the reply under (task, step, attempt), unless an earlier attempt booked this very reply

All of a step's model-side bookkeeping happens inside this one activity (one Temporal round trip).
The engine is asked to treat the step as idempotent (one key per task step), so a retry whose
predecessor's reply had already finished receives that reply instead of paying for a new one;
what a dead attempt generated and nobody receives is booked as lost (attempts.py), so nothing is
hidden and the budget still holds. On the fleet, a step taken over from a generation an
interruption cut off continues that generation's text instead of starting over, so the tokens it
had written are kept rather than paid for twice.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from temporalio import activity
from temporalio.exceptions import ApplicationError

from sdk.wire.attempts import Attempts, BookedAttempt, DeadAttempt
from sdk.wire.contracts import (
    GENERATE_ACTIVITY,
    GENERATION_CUT,
    NODE_STOPPING,
    REPLICA_UNAVAILABLE,
    GenerationProgress,
    LlmStepInput,
    LlmStepResult,
    Reply,
    Shortfall,
)
from sdk.wire.ledger import KEPT, LOST, DeadTokens
from sdk.wire.limits import MIN_ANSWER_TOKENS
from sdk.wire.prefix import continuable
from sdk.wire.prices import Prices, call_cost, generated_cost
from sdk.wire.step_call import CallReport, ModelRoute, StepRef
from sdk.wire.streamed_reply import ReplyAssembly, delta_text
from sdk.wire.writing import Ending

from .step.call_plan import PlannedCall, plan_call
from .step.heartbeats import beat, keep_beating
from .step.model_stream import ModelCallError, StreamRequest, open_stream
from .step.ports import ModelRouter, ReplicaUnavailable, StepBooks
from .step.spans import annotate_checkpoint, annotate_generation, record_cut
from .step.tokens import _litellm, encode
from .step.writing_board import BOARD, WritingBoard

IDEMPOTENCY_HEADER = "Idempotency-Key"  # one key per task step: a retry gets a finished reply back


@dataclass(frozen=True)
class _Streamed:
    reply: ReplyAssembly
    ttft_s: float
    duration_s: float


@dataclass(frozen=True)
class _Step:
    """What every phase of one attempt needs: the input, its books key, the attempt's number, the route."""

    inp: LlmStepInput
    ref: StepRef
    attempt: int
    route: ModelRoute
    prices: Prices | None


class LlmStepActivities:
    """`books` is the store beside the control queue's worker, or the control plane's API on a GPU
    node; either way a normal step costs two bookkeeping calls (prepare, settle). `board` is where each text
    delta goes as it arrives, for whoever follows the step (writing_board.py)."""

    def __init__(self, books: StepBooks, router: ModelRouter, board: WritingBoard = BOARD) -> None:
        self.books = books
        self.router = router
        self.board = board

    @activity.defn(name=GENERATE_ACTIVITY)
    async def generate(self, inp: LlmStepInput) -> LlmStepResult:
        """Resume what earlier attempts left, plan the call within the allowance, stream it, settle it."""
        attempt = inp.attempt_base + activity.info().attempt  # numbered across the step's placements
        ref = StepRef(
            inp.task_id, inp.step, inp.model, inp.tenant, inp.placement.lease_id if inp.placement is not None else None
        )
        progress = await self._resume(inp, ref, attempt)
        # Beat on a clock as well as on tokens: before the first token (bookkeeping, a long prefill) the
        # workflow must still see the node alive.
        beating = asyncio.create_task(keep_beating(progress))
        try:
            route = self._route(inp)
            step = _Step(inp, ref, attempt, route, _prices(route))
            await self._take_over_prefix(step, progress)
            call = await asyncio.to_thread(plan_call, self.books, inp, ref, route, progress, step.prices)
            if not call.answer.affordable:
                return await self._shortfall(step, progress, call)
            streamed = await self._stream(step, call, progress)
            return await self._settle(step, call, streamed, progress)
        except asyncio.CancelledError:
            raise _cut(inp, progress) from None
        finally:
            beating.cancel()

    # ----- resume and route ------------------------------------------------------------------
    async def _resume(self, inp: LlmStepInput, ref: StepRef, attempt: int) -> Attempts:
        """What earlier attempts of the step left: a first attempt on a new placement takes over the heartbeat
        of the generation an interruption cut off, so what that one generated is booked, never hidden."""
        progress = Attempts.resume(
            attempt, GenerationProgress.from_details(activity.info().heartbeat_details) or inp.inherited_progress
        )
        if attempt > 1:
            progress.booked = await asyncio.to_thread(self._booked_earlier, ref, attempt)
        beat(progress)
        return progress

    def _route(self, inp: LlmStepInput) -> ModelRoute:
        try:
            return self.router.route(inp.model, inp.placement)
        except ReplicaUnavailable as exc:
            # Retrying on this node cannot help (the replica is gone); the workflow places the step again.
            raise ApplicationError(str(exc), type=REPLICA_UNAVAILABLE, non_retryable=True) from exc
        except ValueError as exc:
            raise ApplicationError(str(exc), type="UnknownModel", non_retryable=True) from exc

    async def _take_over_prefix(self, step: _Step, progress: Attempts) -> None:
        """Continue the text a cut generation had written (its tokens are booked once, as kept), or start over.
        Fleet engines continue a final assistant message; a hosted API would answer it anew."""
        if progress.carried is None:
            return
        if step.inp.placement is not None and continuable(progress.carried, step.inp.max_tokens):
            await asyncio.to_thread(self._book_dead, step, progress.continue_prefix())
        else:
            progress.drop_prefix()

    # ----- generate --------------------------------------------------------------------------
    async def _stream(self, step: _Step, call: PlannedCall, progress: Attempts) -> _Streamed:
        """Stream the reply, counting what arrives for the heartbeats (the ledger uses the engine's usage)."""
        started = time.monotonic()
        ttft: float | None = None
        reply = ReplyAssembly(progress.prefix)
        try:  # an engine refusing the request (say, past the context window) is not asked again
            stream = await open_stream(
                step.route,
                StreamRequest(
                    messages=call.messages,
                    tools=call.tools,
                    max_tokens=call.answer.max_tokens,
                    headers={
                        "X-Berth-Task": step.inp.task_id,
                        IDEMPOTENCY_HEADER: f"{step.inp.task_id}/{step.inp.step}",
                    },
                    continue_final_message=bool(progress.prefix),
                    settings=step.inp.settings,
                ),
            )
        except Exception as exc:
            raise _classify(exc) from exc
        writing = self.board.start(step.inp.task_id, step.inp.step, step.attempt, progress.prefix)
        ending: Ending = "cut"
        try:
            async for delta in stream:
                reply.add(delta)
                writing.write(delta.text)  # the step's text is the message's content: tool calls are not in it
                if progress.response_id is None and delta.response_id:
                    if dead := progress.resolve(delta.response_id):
                        await asyncio.to_thread(self._book_dead, step, dead)
                    beat(progress)
                text, plain = delta_text(delta)
                if text and ttft is None:
                    ttft = time.monotonic() - started
                progress.wrote(text, len(encode(text)) if text else 0, plain)  # `keep_beating` reports it
                if delta.usage is not None:
                    ending = "finished"
                    break  # the usage closes the reply: the engine has nothing more to say
        except Exception as exc:
            beat(progress)
            raise _classify(exc) from exc
        finally:
            writing.end(ending)
            await stream.aclose()  # releases the engine connection; the engine stops a reply nobody reads
        duration = time.monotonic() - started
        return _Streamed(reply, ttft or duration, duration)

    # ----- settle ----------------------------------------------------------------------------
    async def _settle(self, step: _Step, call: PlannedCall, streamed: _Streamed, progress: Attempts) -> Reply:
        """Book the reply under (task, step, attempt), unless an earlier attempt already booked this very reply."""
        inp, route = step.inp, step.route
        if streamed.reply.usage is None:
            raise ApplicationError(f"{route.served_by} returned no usage for {inp.model}")
        engine_prompt, completion_tokens = streamed.reply.usage
        continued = progress.prefix_tokens if progress.prefix else 0
        prompt_tokens = max(0, engine_prompt - continued)  # the kept text is booked once, as kept
        cost = call_cost(step.prices, prompt_tokens, completion_tokens)
        message, finish_reason = streamed.reply.message(), streamed.reply.finish_reason
        if not progress.replayed:
            settled = await asyncio.to_thread(
                self.books.settle,
                step.ref,
                CallReport(
                    attempt=step.attempt,
                    prompt_tokens=prompt_tokens,
                    completion_tokens=completion_tokens,
                    cost_usd=cost,
                    ttft_s=streamed.ttft_s,
                    duration_s=streamed.duration_s,
                    served_by=route.served_by,
                    response_id=progress.response_id or "",
                    finish_reason=finish_reason,
                    tool_calls=tuple(c.name for c in message.tool_calls or []),
                    lost_tokens=progress.lost_before,
                    kept_tokens=progress.kept_before,
                    continued_tokens=continued,
                    placement=inp.placement,
                ),
            )
            cost = settled.cost_usd
        annotate_generation(
            inp.task_id,
            inp.step,
            inp.model,
            inp.placement,
            streamed.ttft_s,
            prompt_tokens,
            completion_tokens,
            streamed.duration_s,
        )
        annotate_checkpoint(inp.task_id, call.checkpoint)
        return Reply(
            message=message,
            finish_reason=finish_reason,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            lost_tokens=progress.lost_before + progress.unreported_tokens,
            kept_tokens=progress.kept_before,
            cost_usd=cost + _dead_cost(step, progress),
            ttft_s=streamed.ttft_s,
            duration_s=streamed.duration_s,
            attempt=step.attempt,
            served_by=route.served_by,
            checkpoint=call.checkpoint,
            budget_limited=call.answer.budget_limited,
            placement=inp.placement,
        )

    async def _shortfall(self, step: _Step, progress: Attempts, call: PlannedCall) -> Shortfall:
        """No call is made: the allowance cannot pay for a prompt and a minimum answer. What is missing is what
        would lift the answer tokens to that minimum."""
        if dead := progress.resolve(None):
            await asyncio.to_thread(self._book_dead, step, dead)
        return Shortfall(
            shortfall_tokens=MIN_ANSWER_TOKENS - call.answer.max_tokens,
            shortfall_usd=call.answer.shortfall_usd,
            lost_tokens=progress.lost_before + progress.unreported_tokens,
            kept_tokens=progress.kept_before,
            cost_usd=_dead_cost(step, progress),
            attempt=step.attempt,
            checkpoint=call.checkpoint,
            placement=step.inp.placement,
        )

    # ----- the books of dead attempts --------------------------------------------------------
    def _booked_earlier(self, ref: StepRef, attempt: int) -> list[BookedAttempt]:
        """Replies earlier attempts of this step booked before dying unheard (rare: retries only)."""
        return [
            BookedAttempt(e.attempt, e.prompt_tokens + e.completion_tokens, e.cost_usd, e.response_id)
            for e in self.books.booked(ref, attempt)
        ]

    def _book_dead(self, step: _Step, dead: list[DeadAttempt]) -> None:
        """Book dead attempts' tokens: those the reply continues from as kept, the others as lost."""
        self.books.book_interrupted(
            step.ref,
            [
                DeadTokens(attempt.attempt, kind, tokens, generated_cost(step.prices, tokens))
                for attempt in dead
                for kind, tokens in ((LOST, attempt.generated - attempt.kept), (KEPT, attempt.kept))
                if tokens > 0
            ],
        )


def _dead_cost(step: _Step, progress: Attempts) -> float:
    """What the step pays for attempts that died: their lost and kept tokens, and replies booked unheard."""
    return progress.unreported_usd + generated_cost(step.prices, progress.lost_before + progress.kept_before)


def _cut(inp: LlmStepInput, progress: Attempts) -> ApplicationError:
    """Cut off mid-generation: by the worker leaving (SIGTERM, a preemption notice), or by the workflow (a
    simulated preemption, the task's cancellation). Say which, with what was generated, so the workflow resumes
    the step elsewhere or books those tokens (a plain cancellation would reach it without them)."""
    kind = NODE_STOPPING if activity.is_worker_shutdown() else GENERATION_CUT
    record_cut(kind, inp.placement, progress.generated)
    what = "the worker shut down mid-generation" if kind == NODE_STOPPING else "the workflow cut the generation off"
    return ApplicationError(what, progress.progress(), type=kind)


def _prices(route: ModelRoute) -> Prices | None:
    """USD per token: the catalogue's for self-hosted, litellm's map for hosted."""
    prices = Prices.per_million(route.usd_per_1m_prompt, route.usd_per_1m_completion)
    if prices is not None or route.openai_compatible:
        return prices
    try:
        info = _litellm().get_model_info(route.litellm_model)
    except Exception:
        return None
    prompt, completion = info.get("input_cost_per_token"), info.get("output_cost_per_token")
    return Prices(float(prompt), float(completion)) if prompt is not None and completion is not None else None


def _classify(exc: Exception) -> Exception:
    """Errors that a retry cannot fix (a bad request, e.g. over the context window) stop the retries."""
    status = exc.status_code if isinstance(exc, ModelCallError) else getattr(exc, "status_code", None)
    if isinstance(status, int) and 400 <= status < 500 and status not in (408, 429):
        return ApplicationError(f"{type(exc).__name__}: {exc}", type="ModelRequestRejected", non_retryable=True)
    return ApplicationError(f"{type(exc).__name__}: {exc}", type="ModelCallFailed")
