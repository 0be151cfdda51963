"""A model's streamed reply as one typed stream, whichever engine writes it.

Berth's own engines (the simulated engine, llama.cpp, vLLM, SGLang) all speak the OpenAI chat API, so a step reads
them with a plain streaming POST: on a GPU node litellm's streaming wrapper (its chunk objects, chunk builder and
per-call cost bookkeeping) cost about half the CPU of a step's model call even with no-log, for nothing an
OpenAI-compatible server needs. Hosted providers still go through litellm, which knows each one's dialect. Both
are read as the same `StreamDelta` values (sdk/wire/streamed_reply.py), so the step has one loop for either
(benchmarks/model_client.py measures the two clients).

    stream = await open_stream(route, StreamRequest(messages, tools, max_tokens, headers, False))
    try:
        async for delta in stream:  # ends after the delta that carries the usage
            ...
    finally:
        await stream.aclose()

A failure, at the open or midway, is a `ModelCallError` whose `status_code` says whether the engine refused the
request (4xx but 408 and 429: retrying it cannot help) or never answered (None).
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import httpx

from sdk.wire.step_call import ModelRoute
from sdk.wire.streamed_reply import StreamDelta, ToolCallDelta

from .tokens import _litellm

__all__ = [
    "CONTINUE_FINAL_MESSAGE",
    "ModelCallError",
    "ModelStream",
    "StreamRequest",
    "open_stream",
]

# How vLLM (and Berth's simulated and llama.cpp engines) is asked to go on writing the last, assistant, message.
CONTINUE_FINAL_MESSAGE = {"continue_final_message": True, "add_generation_prompt": False}
# Engines close a kept-alive connection idle for 5 s (uvicorn's default; vLLM, SGLang and Berth's engines serve
# with uvicorn): the pool drops it after 2 s, so a request is never sent on a connection the engine is closing
# (httpx's default, also 5 s, races it: "server disconnected" before the request ran).
KEEPALIVE_S = 2.0
# An error body is read this far for its message (an engine's is a few hundred bytes); the message is cut to
# ERROR_MESSAGE_CHARS so a refusal quoting the whole prompt does not fill the step's failure.
ERROR_BODY_BYTES = 8192
ERROR_MESSAGE_CHARS = 500


@dataclass(frozen=True)
class StreamRequest:
    """What a step asks the model; `continue_final_message`: go on writing the last (assistant) message.
    `settings`: the sampling settings that are set (ModelSettings.chosen()), sent as the OpenAI API names them."""

    messages: list[dict]
    tools: list[dict] | None
    max_tokens: int
    headers: dict[str, str]
    continue_final_message: bool
    timeout_s: float = 600.0
    settings: dict[str, Any] = field(default_factory=dict)


def hosted_settings(litellm_model: str) -> frozenset[str] | None:
    """The OpenAI parameters litellm sends to this hosted model's provider; None when litellm does not know
    the provider (the provider then refuses what it cannot take)."""
    known = _litellm().get_supported_openai_params(model=litellm_model)
    return None if known is None else frozenset(known)


class ModelCallError(Exception):
    """A model call that failed. `status_code` is the HTTP status when the engine answered with an error, None
    when it never answered (connection refused or cut, a timeout)."""

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class ModelStream:
    """A reply as it arrives: an async iterator of `StreamDelta` that ends after the delta carrying the usage.

    `aclose()` it in a `finally`: closing a reply still streaming closes its connection, which is how the engine
    learns that the client left (it stops generating and journals what it wrote as aborted).
    """

    def __init__(self, deltas: AsyncGenerator[StreamDelta, None], release: Callable[[], Awaitable[None]]) -> None:
        self._deltas = deltas
        self._release = release

    def __aiter__(self) -> ModelStream:
        return self

    async def __anext__(self) -> StreamDelta:
        return await self._deltas.__anext__()

    async def aclose(self) -> None:
        try:
            await self._deltas.aclose()
        finally:
            await self._release()


async def open_stream(route: ModelRoute, request: StreamRequest) -> ModelStream:
    """Send `request` and return the reply's stream once the engine has answered: with the plain client for
    Berth's own engines (`route.openai_compatible`), through litellm for hosted providers."""
    if route.openai_compatible:
        return await _open_engine_stream(route, request)
    return await _open_litellm_stream(route, request)


# ----- Berth's engines: a plain OpenAI-compatible client ------------------------------------------------------
# One client per event loop, made on its first call, as the replica probes do (orchestrator/engines/replicas/
# probe.py): a client per call would build an SSL context each time (~50 ms of CPU here, loading the CA bundle)
# and keep no connection alive; per loop, because a client's connections belong to the loop that opened them.
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = weakref.WeakKeyDictionary()


def _client() -> httpx.AsyncClient:
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        # No cap on connections: a node's concurrent steps must not queue in this pool behind each other; the
        # engine admits and batches them itself. Idle connections go after KEEPALIVE_S, so keeping them all is cheap.
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None, keepalive_expiry=KEEPALIVE_S)
        client = _clients[loop] = httpx.AsyncClient(limits=limits)
    return client


def _served_model(route: ModelRoute) -> str:
    """The model name the engine serves: litellm's route string less its provider prefix, as litellm sends it
    (`hosted_vllm/llama-3.1-8b` asks for `llama-3.1-8b`)."""
    return route.litellm_model.split("/", 1)[-1]


async def _open_engine_stream(route: ModelRoute, request: StreamRequest) -> ModelStream:
    if route.api_base is None:
        raise ValueError(f"{route.name}: an OpenAI-compatible route needs its engine's api_base")
    body: dict[str, Any] = {
        "model": _served_model(route),
        "messages": request.messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": request.max_tokens,
        **request.settings,
    }
    if request.tools is not None:
        body["tools"] = request.tools
    if request.continue_final_message:
        body.update(CONTINUE_FINAL_MESSAGE)
    headers = dict(request.headers)
    if route.api_key:
        headers["Authorization"] = f"Bearer {route.api_key}"
    client = _client()
    url = f"{route.api_base.rstrip('/')}/chat/completions"
    try:
        response = await client.send(
            client.build_request("POST", url, json=body, headers=headers, timeout=request.timeout_s), stream=True
        )
    except httpx.HTTPError as exc:
        raise ModelCallError(f"{route.served_by} did not answer: {_described(exc)}") from exc
    if not response.is_success:
        raise await _refusal(route, response)
    return ModelStream(_engine_deltas(route, response), response.aclose)


async def _refusal(route: ModelRoute, response: httpx.Response) -> ModelCallError:
    """The engine's error status, with the message its body gives."""
    raw = bytearray()
    try:
        async for part in response.aiter_bytes():
            raw += part
            if len(raw) >= ERROR_BODY_BYTES:
                break
    except httpx.HTTPError:
        pass  # a body cut off: the status says what matters
    finally:
        await response.aclose()
    text = raw[:ERROR_BODY_BYTES].decode("utf-8", "replace")
    try:
        message = _error_message(json.loads(text))
    except ValueError:
        message = text.strip()
    return ModelCallError(f"{route.served_by} answered {response.status_code}: {_cut(message)}", response.status_code)


async def _engine_deltas(route: ModelRoute, response: httpx.Response) -> AsyncGenerator[StreamDelta, None]:
    try:
        async with aclosing(_sse_data(response.aiter_lines())) as events:
            async for data in events:
                if data == "[DONE]":
                    continue
                chunk = _chunk(route, data)
                delta = _engine_delta(chunk)
                if delta is None:
                    continue
                if delta.usage is not None and not chunk.get("choices"):
                    # The closing usage chunk. The rest ([DONE], the body's end) is read first, so the connection
                    # goes back to the pool even when the caller stops reading here.
                    async for _ in events:
                        pass
                    yield delta
                    return
                yield delta
    except httpx.HTTPError as exc:
        raise ModelCallError(f"the stream from {route.served_by} broke off: {_described(exc)}") from exc


async def _sse_data(lines: AsyncIterator[str]) -> AsyncGenerator[str, None]:
    """The data of each server-sent event (its `data:` lines, joined by newlines). Comments (an engine's
    keep-alives) and the `event:`, `id:` and `retry:` fields carry nothing a chat reply needs."""
    data: list[str] = []
    async for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data = []
        elif line.startswith("data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(" ") else value)
    if data:  # a last event the body ended without a blank line after
        yield "\n".join(data)


def _chunk(route: ModelRoute, data: str) -> dict[str, Any]:
    """One event's chunk; an error event (vLLM's way to fail a stream it has started) raises."""
    try:
        chunk = json.loads(data)
    except ValueError as exc:
        raise ModelCallError(f"{route.served_by} sent an unreadable chunk: {_cut(data)}") from exc
    if not isinstance(chunk, dict):
        raise ModelCallError(f"{route.served_by} sent an unreadable chunk: {_cut(data)}")
    if "error" in chunk or chunk.get("object") == "error":
        error = chunk.get("error", chunk)
        code = error.get("code") if isinstance(error, dict) else None
        status = code if isinstance(code, int) and 400 <= code < 600 else None
        raise ModelCallError(f"{route.served_by} failed the stream: {_cut(_error_message(chunk))}", status)
    return chunk


def _engine_delta(chunk: dict[str, Any]) -> StreamDelta | None:
    """The delta of an OpenAI chunk; None for a chunk with neither a choice nor usage."""
    usage = _usage(chunk.get("usage"))
    choices = chunk.get("choices")
    if not choices:
        return StreamDelta(chunk.get("id") or None, "", (), None, usage) if usage is not None else None
    choice = choices[0]
    delta = choice.get("delta") or {}
    calls = tuple(
        ToolCallDelta(
            call.get("index") or 0,
            call.get("id"),
            (call.get("function") or {}).get("name"),
            (call.get("function") or {}).get("arguments"),
        )
        for call in delta.get("tool_calls") or ()
    )
    return StreamDelta(chunk.get("id") or None, delta.get("content") or "", calls, choice.get("finish_reason"), usage)


def _usage(raw: Any) -> tuple[int, int] | None:
    if not isinstance(raw, dict) or raw.get("prompt_tokens") is None:
        return None
    return int(raw["prompt_tokens"]), int(raw.get("completion_tokens") or 0)


def _error_message(body: Any) -> str:
    """The message of an OpenAI-style error body ({"error": {"message"}}, vLLM's older {"object": "error",
    "message"}, FastAPI's {"detail"})."""
    error = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(error, dict):
        error = error.get("message") or error.get("detail") or error
    return error if isinstance(error, str) else json.dumps(error)


def _described(exc: httpx.HTTPError) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _cut(text: str) -> str:
    return text if len(text) <= ERROR_MESSAGE_CHARS else text[:ERROR_MESSAGE_CHARS] + "…"


# ----- hosted providers: litellm ----------------------------------------------------------------------------
async def _open_litellm_stream(route: ModelRoute, request: StreamRequest) -> ModelStream:
    litellm = _litellm()
    continuing = {"extra_body": CONTINUE_FINAL_MESSAGE} if request.continue_final_message else {}
    try:
        stream = await litellm.acompletion(
            model=route.litellm_model,
            api_base=route.api_base,
            api_key=route.api_key,
            messages=request.messages,
            tools=request.tools,
            max_tokens=request.max_tokens,
            stream=True,
            stream_options={"include_usage": True},
            extra_headers=request.headers,
            timeout=request.timeout_s,
            **continuing,
            **request.settings,
            # Berth books usage and cost itself (ledger, catalogue prices); litellm's own success
            # logging would recount and reprice every reply, about 10 ms per call.
            **{"no-log": True},
        )
    except Exception as exc:  # litellm's errors are many types; the status they carry is what the caller reads
        raise _litellm_error(exc) from exc
    return ModelStream(_litellm_deltas(stream), stream.aclose)


async def _litellm_deltas(stream: Any) -> AsyncGenerator[StreamDelta, None]:
    while True:
        try:
            chunk = await stream.__anext__()
        except StopAsyncIteration:
            return
        except Exception as exc:
            raise _litellm_error(exc) from exc
        delta = _litellm_delta(chunk)
        if delta is None:
            continue
        yield delta
        if delta.usage is not None and not chunk.choices:
            # litellm sends the usage last, once the engine's stream has ended. Asking it for one more chunk
            # would only run its end-of-stream success logging, which ignores no-log and reprices and recounts
            # the whole conversation (~15 ms of CPU per call).
            return


def _litellm_delta(chunk: Any) -> StreamDelta | None:
    """The delta of a litellm chunk (usage on earlier chunks litellm strips); None for one that carries nothing."""
    raw = getattr(chunk, "usage", None)
    usage = None
    if raw is not None and getattr(raw, "prompt_tokens", None) is not None:
        usage = (int(raw.prompt_tokens), int(raw.completion_tokens or 0))
    response_id = getattr(chunk, "id", None) or None
    if not chunk.choices:
        return StreamDelta(response_id, "", (), None, usage) if usage is not None else None
    choice = chunk.choices[0]
    delta = choice.delta
    calls = tuple(
        ToolCallDelta(
            call.index or 0, call.id, getattr(call.function, "name", None), getattr(call.function, "arguments", None)
        )
        for call in getattr(delta, "tool_calls", None) or ()
    )
    return StreamDelta(response_id, getattr(delta, "content", None) or "", calls, choice.finish_reason, usage)


def _litellm_error(exc: Exception) -> ModelCallError:
    status = getattr(exc, "status_code", None)
    return ModelCallError(f"{type(exc).__name__}: {exc}", status if isinstance(status, int) else None)
