"""The LLM call of a step: reserve within the allowance, generate, settle the ledger.

All of a step's model-side bookkeeping happens inside this one activity (one Temporal
round trip): counting the prompt, shrinking `max_tokens` to what the budget can pay for,
streaming the reply with heartbeats, and writing the ledger row under its idempotency key.
The engine is asked to treat the step as idempotent (one key per task step), so a retry
whose predecessor's reply had already finished receives that reply instead of paying for a
new one; what a dead attempt generated and nobody receives is booked as lost (activities/
attempts.py), so nothing is hidden and the budget still holds. On the fleet, a step taken
over from a generation an interruption cut off continues that generation's text instead of
starting over, so the tokens it had written are kept rather than paid for twice.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from sdk import CheckpointRef, Message, ToolCall
from sdk._limits import MIN_ANSWER_TOKENS
from sdk.contracts import LlmStepInput, LlmStepResult

from .attempts import Attempts, BookedAttempt, DeadAttempt, continuable
from .ports import (GENERATION_CUT, KEPT, LOST, NODE_STOPPING, REPLICA_UNAVAILABLE, CallReport, DeadTokens, ModelRoute,
                    ModelRouter, ReplicaUnavailable, StepBooks, StepRef)
from .prices import Prices, call_cost, generated_cost
from .spans import annotate_checkpoint, annotate_generation, record_cut
from .tokens import _litellm, count_prompt, encode, sendable_tools

# While tokens stream, progress is heartbeated twice a second: a node killed without notice loses
# what the last heartbeat that reached Temporal did not carry, so at most ~0.5-1 s of tokens. Before
# the first token (and on a stalled stream) a beat every 2 s keeps the step alive, well inside the
# 5 s heartbeat timeout, at a quarter of the RPCs.
HEARTBEAT_EVERY_S = 0.5
ALIVE_EVERY_S = 2.0
IDEMPOTENCY_HEADER = "Idempotency-Key"  # one key per task step: a retry gets a finished reply back
# How vLLM (and the simulated engine) is asked to go on writing the last, assistant, message.
CONTINUE_FINAL_MESSAGE = {"continue_final_message": True, "add_generation_prompt": False}


@dataclass(frozen=True)
class _Call:
    """A call the budget allows, as planned before it is made."""

    checkpoint: CheckpointRef
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    max_tokens: int
    shortfall_usd: float | None
    budget_limited: bool  # the allowance (not the step's own answer room) set max_tokens


@dataclass(frozen=True)
class _Streamed:
    chunks: list[Any]
    ttft_s: float
    duration_s: float


class LlmStepActivities:
    """`books` is the store beside the control queue's worker, or the control plane's API on a GPU
    node; either way a normal step costs two bookkeeping calls (prepare, settle)."""

    def __init__(self, books: StepBooks, router: ModelRouter) -> None:
        self.books = books
        self.router = router

    @activity.defn(name="berth.generate")
    async def generate(self, inp: LlmStepInput) -> LlmStepResult:
        """Resume what earlier attempts left, plan the call within the allowance, stream it, settle it."""
        attempt = inp.attempt_base + activity.info().attempt  # numbered across the step's placements
        step = StepRef(inp.task_id, inp.step, inp.model, inp.tenant,
                       inp.placement.lease_id if inp.placement is not None else None)
        progress = await self._resume(inp, step, attempt)
        # Beat on a clock as well as on tokens: before the first token (bookkeeping, a long prefill) the
        # workflow must still see the node alive, or it would move the step elsewhere.
        beating = asyncio.create_task(_keep_beating(progress))
        try:
            route = self._route(inp)
            prices = _prices(route)
            await self._take_over_prefix(inp, step, progress, prices)
            call = await asyncio.to_thread(self._plan, inp, step, route, progress, prices)
            if call.max_tokens < MIN_ANSWER_TOKENS:
                return await self._shortfall(inp, step, progress, call, prices, attempt)
            streamed = await self._stream(inp, step, route, call, progress, prices)
            return await self._settle(inp, step, route, call, streamed, progress, prices, attempt)
        except asyncio.CancelledError:
            # Cut off mid-generation: by the worker leaving (SIGTERM, a preemption notice), or by the
            # workflow itself (a simulated preemption). Say which, with what was generated, so the
            # workflow resumes the step elsewhere and books those tokens as lost (a plain cancellation
            # would reach it without them).
            kind = NODE_STOPPING if activity.is_worker_shutdown() else GENERATION_CUT
            record_cut(kind, inp.placement, progress.generated)
            if kind == NODE_STOPPING:
                raise ApplicationError("the worker shut down mid-generation", progress.details(),
                                       type=NODE_STOPPING) from None
            raise ApplicationError("the workflow cut the generation off", progress.details(),
                                   type=GENERATION_CUT) from None
        finally:
            beating.cancel()

    # ----- phases ---------------------------------------------------------------------------
    async def _resume(self, inp: LlmStepInput, step: StepRef, attempt: int) -> Attempts:
        """What earlier attempts of the step left: a first attempt on a new placement takes over the heartbeat
        of the generation an interruption cut off, so what that one generated is booked, never hidden."""
        info = activity.info()
        details = info.heartbeat_details or ([inp.inherited_progress] if inp.inherited_progress else [])
        progress = Attempts.resume(attempt, details)
        if attempt > 1:
            progress.booked = await asyncio.to_thread(self._booked_earlier, step, attempt)
        activity.heartbeat(progress.details())
        return progress

    async def _take_over_prefix(self, inp: LlmStepInput, step: StepRef, progress: Attempts,
                                prices: Prices | None) -> None:
        """Continue the text a cut generation had written (its tokens are booked once, as kept), or start over.
        Fleet engines continue a final assistant message; a hosted API would answer it anew."""
        if progress.carried is None:
            return
        if inp.placement is not None and continuable(progress.carried, inp.max_tokens):
            await asyncio.to_thread(self._book_dead, step, progress.continue_prefix(), prices)
        else:
            progress.drop_prefix()

    def _plan(self, inp: LlmStepInput, step: StepRef, route: ModelRoute, progress: Attempts,
              prices: Prices | None) -> _Call:
        """Read the conversation and size the answer to what the allowance (and, on the fleet, the control
        plane's own grant) pays for. The kept text a continuation re-sends is counted in neither the
        reservation nor the prompt charged: it is paid for once, as kept tokens. The prompt is counted by the
        model's own tokenizer where the route has one (exact, as the control plane counts it too)."""
        prepared = self.books.prepare(step, inp.checkpoint, inp.pending)
        messages = [m.to_openai() for m in prepared.messages]
        tools = sendable_tools(inp.tools) or None
        continued = progress.prefix_tokens if progress.prefix else 0
        reserve = count_prompt(messages, tools, route.tokenizer).reserved(continued)
        room = inp.max_tokens - progress.prefix_tokens  # a continuation's answer room is what the cut text left
        max_tokens = min(room, inp.token_allowance - progress.held_back - reserve)
        if prepared.max_tokens is not None:
            max_tokens = min(max_tokens, prepared.max_tokens)
        shortfall_usd = None
        if inp.usd_allowance is not None and prices is not None:
            usd_left = inp.usd_allowance - _held_back_usd(progress, prices)
            max_tokens = min(max_tokens, prices.affordable_completion(usd_left, reserve))
            needed_usd = prices.call(reserve, MIN_ANSWER_TOKENS)
            shortfall_usd = needed_usd - usd_left if needed_usd > usd_left else None
        if progress.prefix:
            messages.append({"role": "assistant", "content": progress.prefix})
        return _Call(prepared.checkpoint, messages, tools, max_tokens, shortfall_usd, budget_limited=max_tokens < room)

    async def _shortfall(self, inp: LlmStepInput, step: StepRef, progress: Attempts, call: _Call,
                         prices: Prices | None, attempt: int) -> LlmStepResult:
        """No call is made: the allowance cannot pay for a prompt and a minimum answer. What is missing is what
        would lift the answer tokens to that minimum."""
        if dead := progress.resolve(None):
            await asyncio.to_thread(self._book_dead, step, dead, prices)
        return LlmStepResult(
            shortfall_tokens=MIN_ANSWER_TOKENS - call.max_tokens, shortfall_usd=call.shortfall_usd,
            lost_tokens=progress.lost_before + progress.unreported_tokens, kept_tokens=progress.kept_before,
            cost_usd=progress.unreported_usd + generated_cost(prices, progress.lost_before + progress.kept_before),
            attempt=attempt, checkpoint=call.checkpoint, placement=inp.placement,
        )

    async def _stream(self, inp: LlmStepInput, step: StepRef, route: ModelRoute, call: _Call, progress: Attempts,
                      prices: Prices | None) -> _Streamed:
        """Stream the reply, counting what arrives for the heartbeats (the ledger uses the engine's usage)."""
        started = time.monotonic()
        ttft: float | None = None
        chunks: list[Any] = []
        continuing = {"extra_body": CONTINUE_FINAL_MESSAGE} if progress.prefix else {}
        stream = await _litellm().acompletion(
            model=route.litellm_model, api_base=route.api_base, api_key=route.api_key, messages=call.messages,
            tools=call.tools, max_tokens=call.max_tokens, stream=True, stream_options={"include_usage": True},
            extra_headers={"X-Berth-Task": inp.task_id, IDEMPOTENCY_HEADER: f"{inp.task_id}/{inp.step}"},
            timeout=600, **continuing,
            # Berth books usage and cost itself (ledger, catalogue prices); litellm's own success
            # logging would recount and reprice every reply, about 10 ms per call.
            **{"no-log": True},
        )
        try:
            async for chunk in stream:
                chunks.append(chunk)
                if progress.response_id is None and getattr(chunk, "id", None):
                    if dead := progress.resolve(chunk.id):
                        await asyncio.to_thread(self._book_dead, step, dead, prices)
                    activity.heartbeat(progress.details())
                if _is_closing_usage(chunk):
                    # litellm sends the usage last, once the engine's stream has ended. Asking it
                    # for one more chunk would only run its end-of-stream success logging, which
                    # ignores no-log and reprices and recounts the whole conversation (~15 ms of
                    # CPU per call); Berth books usage and cost itself.
                    break
                text, delta_tokens, plain = _delta(chunk)
                if delta_tokens and ttft is None:
                    ttft = time.monotonic() - started
                progress.wrote(text, delta_tokens, plain)  # `_keep_beating` reports it
        except Exception as exc:
            activity.heartbeat(progress.details())
            raise _classify(exc) from exc
        finally:
            await stream.aclose()  # releases the engine connection; a no-op when litellm closed it already
        duration = time.monotonic() - started
        return _Streamed(chunks, ttft or duration, duration)

    async def _settle(self, inp: LlmStepInput, step: StepRef, route: ModelRoute, call: _Call, streamed: _Streamed,
                      progress: Attempts, prices: Prices | None, attempt: int) -> LlmStepResult:
        """Book the reply under (task, step, attempt), unless an earlier attempt already booked this very reply."""
        reply = _assemble(streamed.chunks, progress.prefix)
        if reply.usage is None:
            raise ApplicationError(f"{route.served_by} returned no usage for {inp.model}")
        engine_prompt, completion_tokens = reply.usage
        continued = progress.prefix_tokens if progress.prefix else 0
        prompt_tokens = max(0, engine_prompt - continued)  # the kept text is booked once, as kept
        cost = call_cost(prices, prompt_tokens, completion_tokens)
        message = reply.message
        if not progress.replayed:
            settled = await asyncio.to_thread(self.books.settle, step, CallReport(
                attempt=attempt, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, cost_usd=cost,
                ttft_s=streamed.ttft_s, duration_s=streamed.duration_s, served_by=route.served_by,
                response_id=progress.response_id or "", finish_reason=reply.finish_reason,
                tool_calls=tuple(c.name for c in message.tool_calls or []), lost_tokens=progress.lost_before,
                kept_tokens=progress.kept_before, continued_tokens=continued, placement=inp.placement))
            cost = settled.cost_usd
        annotate_generation(inp.task_id, inp.step, inp.model, inp.placement, streamed.ttft_s, prompt_tokens,
                            completion_tokens, streamed.duration_s)
        annotate_checkpoint(inp.task_id, call.checkpoint)
        dead_cost = generated_cost(prices, progress.lost_before + progress.kept_before)
        return LlmStepResult(
            message=message, finish_reason=reply.finish_reason, prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens, lost_tokens=progress.lost_before + progress.unreported_tokens,
            kept_tokens=progress.kept_before, cost_usd=cost + progress.unreported_usd + dead_cost,
            ttft_s=streamed.ttft_s, duration_s=streamed.duration_s, attempt=attempt, served_by=route.served_by,
            checkpoint=call.checkpoint, budget_limited=call.budget_limited, placement=inp.placement,
        )

    # ----- helpers --------------------------------------------------------------------------
    def _booked_earlier(self, step: StepRef, attempt: int) -> list[BookedAttempt]:
        """Replies earlier attempts of this step booked before dying unheard (rare: retries only)."""
        return [BookedAttempt(e.attempt, e.prompt_tokens + e.completion_tokens, e.cost_usd, e.response_id)
                for e in self.books.booked(step, attempt)]

    def _route(self, inp: LlmStepInput) -> ModelRoute:
        try:
            return self.router.route(inp.model, inp.placement)
        except ReplicaUnavailable as exc:
            # Retrying on this node cannot help (the replica is gone); the workflow places the step again.
            raise ApplicationError(str(exc), type=REPLICA_UNAVAILABLE, non_retryable=True) from exc
        except ValueError as exc:
            raise ApplicationError(str(exc), type="UnknownModel", non_retryable=True) from exc

    def _book_dead(self, step: StepRef, dead: list[DeadAttempt], prices: Prices | None) -> None:
        """Book dead attempts' tokens: those the reply continues from as kept, the others as lost."""
        self.books.book_interrupted(step, [
            DeadTokens(attempt.attempt, kind, tokens, generated_cost(prices, tokens))
            for attempt in dead for kind, tokens in ((LOST, attempt.generated - attempt.kept), (KEPT, attempt.kept))
            if tokens > 0])


def _held_back_usd(progress: Attempts, prices: Prices) -> float:
    """Dollars the allowance must not give this attempt: what dead attempts generated, and replies booked."""
    booked_tokens = sum(b.tokens for b in progress.booked)
    return generated_cost(prices, progress.held_back - booked_tokens) + sum(b.usd for b in progress.booked)


async def _keep_beating(progress: Attempts) -> None:
    """Heartbeat progress as it grows, and at least every ALIVE_EVERY_S while it does not."""
    sent, quiet = progress.generated, 0.0
    while True:
        await asyncio.sleep(HEARTBEAT_EVERY_S)
        quiet += HEARTBEAT_EVERY_S
        if progress.generated != sent or quiet >= ALIVE_EVERY_S:
            activity.heartbeat(progress.details())
            sent, quiet = progress.generated, 0.0


def _is_closing_usage(chunk: Any) -> bool:
    """litellm's final chunk: no choices, only the request's usage (usage on earlier chunks is stripped)."""
    usage = getattr(chunk, "usage", None)
    return not chunk.choices and usage is not None and getattr(usage, "prompt_tokens", None) is not None


def _delta(chunk: Any) -> tuple[str, int, bool]:
    """(text, tokens, plain) of one streamed chunk, for heartbeat progress (the ledger uses the
    engine's usage); `plain` is False for a tool-call delta, which a continuation cannot resume."""
    if not chunk.choices:
        return "", 0, True
    delta = chunk.choices[0].delta
    text = getattr(delta, "content", None) or ""
    calls = getattr(delta, "tool_calls", None) or []
    for call in calls:
        fn = getattr(call, "function", None)
        text += (getattr(fn, "name", None) or "") + (getattr(fn, "arguments", None) or "")
    return text, len(encode(text)) if text else 0, not calls


@dataclass
class _Reply:
    message: Message
    finish_reason: str | None
    usage: tuple[int, int] | None


def _assemble(chunks: list[Any], prefix: str = "") -> _Reply:
    """Join streamed deltas into one assistant message (after the `prefix` it continues); usage
    comes from the final chunk.

    Done here rather than with litellm's chunk builder, which recounts tokens with a
    tokenizer it may try to download for self-hosted model names.
    """
    text: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    finish_reason: str | None = None
    usage: tuple[int, int] | None = None
    for chunk in chunks:
        raw_usage = getattr(chunk, "usage", None)
        if raw_usage is not None and getattr(raw_usage, "prompt_tokens", None) is not None:
            usage = (int(raw_usage.prompt_tokens), int(raw_usage.completion_tokens or 0))
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        finish_reason = choice.finish_reason or finish_reason
        delta = choice.delta
        if getattr(delta, "content", None):
            text.append(delta.content)
        for call in getattr(delta, "tool_calls", None) or []:
            slot = calls.setdefault(call.index or 0, {"id": "", "name": "", "arguments": ""})
            slot["id"] = call.id or slot["id"]
            fn = call.function
            if fn is not None:
                slot["name"] += fn.name or ""
                slot["arguments"] += fn.arguments or ""
    tool_calls = [ToolCall(id=c["id"], name=c["name"], arguments=c["arguments"] or "{}")
                  for _, c in sorted(calls.items())]
    message = Message(role="assistant", content=prefix + "".join(text) or None, tool_calls=tool_calls or None)
    return _Reply(message, finish_reason, usage)


def _prices(route: ModelRoute) -> Prices | None:
    """USD per token: the catalogue's for self-hosted, litellm's map for hosted."""
    prices = Prices.per_million(route.usd_per_1m_prompt, route.usd_per_1m_completion)
    if prices is not None:
        return prices
    try:
        info = _litellm().get_model_info(route.litellm_model)
    except Exception:
        return None
    prompt, completion = info.get("input_cost_per_token"), info.get("output_cost_per_token")
    return Prices(float(prompt), float(completion)) if prompt is not None and completion is not None else None


def _classify(exc: Exception) -> Exception:
    """Errors that a retry cannot fix (a bad request, e.g. over the context window) stop the retries."""
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and 400 <= status < 500 and status not in (408, 429):
        return ApplicationError(f"{type(exc).__name__}: {exc}", type="ModelRequestRejected", non_retryable=True)
    return ApplicationError(f"{type(exc).__name__}: {exc}", type="ModelCallFailed")


