"""activities/step/model_stream.py over real loopback servers: the simulated engine (a process, as Berth runs it), a
slow one in this process (to leave a reply midway), and a hand-written HTTP/1.1 server that decides every byte
(frames split across reads, keep-alive comments, error statuses) and sees the client come and go."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from activities.step.model_stream import ModelCallError, StreamRequest, open_stream  # noqa: E402
from activities.step.tokens import count_prompt_tokens  # noqa: E402
from orchestrator.engines.simulated import EngineThread  # noqa: E402
from sdk.wire.step_call import ModelRoute  # noqa: E402
from sdk.wire.streamed_reply import StreamDelta, ToolCallDelta  # noqa: E402
from tests.conftest import free_port  # noqa: E402

MODEL = "llama-3.1-8b"
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    },
}
TEXT = [{"role": "system", "content": "Be thorough."}, {"role": "user", "content": "explain write-ahead logging"}]
TOOL_STEP = [{"role": "system", "content": "Use search."}, {"role": "user", "content": "alpha; beta"}]
PATHS = ["plain", "litellm"]


def _route(base_url: str, path: str = "plain") -> ModelRoute:
    return ModelRoute(
        name=MODEL,
        litellm_model=f"hosted_vllm/{MODEL}",
        api_base=base_url,
        api_key="berth-test",
        usd_per_1m_prompt=None,
        usd_per_1m_completion=None,
        served_by="test-engine",
        openai_compatible=path == "plain",
    )


def _request(
    messages: list[dict],
    tools: list[dict] | None = None,
    max_tokens: int = 64,
    continue_final_message: bool = False,
    task: str = "stream-test",
) -> StreamRequest:
    return StreamRequest(messages, tools, max_tokens, {"X-Berth-Task": task}, continue_final_message)


async def _deltas(route: ModelRoute, request: StreamRequest) -> list[StreamDelta]:
    stream = await open_stream(route, request)
    try:
        return [delta async for delta in stream]
    finally:
        await stream.aclose()


def _text(deltas: list[StreamDelta]) -> str:
    return "".join(d.text for d in deltas)


def _seen(deltas: list[StreamDelta]) -> list[tuple[Any, ...]]:
    """What a step reads of a reply, without the engine's per-request id."""
    return [(d.text, d.tool_calls, d.finish_reason, d.usage) for d in deltas]


# ----- the simulated engine ------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", PATHS)
async def test_text_reply_ends_with_its_usage(engine_url: str, path: str) -> None:
    deltas = await _deltas(_route(engine_url, path), _request(TEXT))
    assert _text(deltas).startswith("Report on explain write-ahead logging")
    assert [d.usage for d in deltas[:-1]] == [None] * (len(deltas) - 1)
    assert deltas[-1].usage == (count_prompt_tokens(TEXT, None), 64)
    assert [d.finish_reason for d in deltas if d.finish_reason] == ["length"]
    ids = {d.response_id for d in deltas}
    assert len(ids) == 1 and ids.pop().startswith("chatcmpl-")


@pytest.mark.parametrize("path", PATHS)
async def test_tool_call_reply_streams_the_call_in_pieces(engine_url: str, path: str) -> None:
    deltas = await _deltas(_route(engine_url, path), _request(TOOL_STEP, [SEARCH]))
    pieces = [c for d in deltas for c in d.tool_calls]
    assert pieces[0] == ToolCallDelta(0, pieces[0].id, "search", "") and pieces[0].id
    assert all(p.index == 0 and p.id is None and p.name is None for p in pieces[1:])
    assert json.loads("".join(p.arguments or "" for p in pieces)) == {"query": "alpha"}
    assert [d.finish_reason for d in deltas if d.finish_reason] == ["tool_calls"]
    assert deltas[-1].usage is not None and deltas[-1].usage[0] == count_prompt_tokens(TOOL_STEP, [SEARCH])


@pytest.mark.parametrize("messages, tools", [(TEXT, None), (TOOL_STEP, [SEARCH])], ids=["text", "tool_call"])
async def test_plain_client_and_litellm_read_the_same_reply(
    engine_url: str, messages: list[dict], tools: list[dict] | None
) -> None:
    plain = await _deltas(_route(engine_url, "plain"), _request(messages, tools))
    through_litellm = await _deltas(_route(engine_url, "litellm"), _request(messages, tools))
    assert _seen(plain) == _seen(through_litellm)


@pytest.mark.parametrize("path", PATHS)
async def test_continue_final_message_goes_on_from_the_kept_text(engine_url: str, path: str) -> None:
    route = _route(engine_url, path)
    whole = _text(await _deltas(route, _request(TEXT, max_tokens=400)))
    kept = whole[:30]
    rest = await _deltas(
        route, _request([*TEXT, {"role": "assistant", "content": kept}], max_tokens=400, continue_final_message=True)
    )
    assert _text(rest) == whole[30:]


@pytest.mark.parametrize("path", PATHS)
async def test_a_request_the_engine_refuses_raises_with_its_status(engine_url: str, path: str) -> None:
    with pytest.raises(ModelCallError, match="maximum context length") as refused:
        await open_stream(_route(engine_url, path), _request(TEXT, max_tokens=10_000_000))
    assert refused.value.status_code == 400


@pytest.mark.parametrize("path", PATHS)
async def test_an_engine_that_does_not_answer_is_worth_a_retry(path: str) -> None:
    with pytest.raises(ModelCallError) as failed:
        await open_stream(_route(f"http://127.0.0.1:{free_port()}/v1", path), _request(TEXT))
    # No status from the plain client; litellm calls a refused connection a 500. Neither reads as a refusal.
    assert failed.value.status_code == (None if path == "plain" else 500)


@pytest.fixture(scope="module")
def slow_engine() -> Iterator[EngineThread]:
    with EngineThread(latency_scale=1.0) as running:
        yield running


@pytest.mark.parametrize("path", PATHS)
async def test_closing_midway_is_the_client_leaving(slow_engine: EngineThread, path: str) -> None:
    task = f"left-midway-{path}"
    long_answer = [{"role": "user", "content": "length: 2000 tokens\nexplain write-ahead logging"}]
    stream = await open_stream(_route(slow_engine.base_url, path), _request(long_answer, max_tokens=2000, task=task))
    try:
        async for delta in stream:
            if delta.text:
                break
    finally:
        await stream.aclose()
    for _ in range(250):  # the engine notices on its next write
        counts = slow_engine.tally.snapshot()["by_task"].get(task, {})
        if counts.get("aborted_requests"):
            break
        await asyncio.sleep(0.02)
    assert counts["aborted_requests"] == 1 and counts["requests"] == 0
    assert 0 < counts["aborted_completion_tokens"] < 2000


# ----- a hand-written server ----------------------------------------------------------------------------------
Respond = Callable[[asyncio.StreamReader, asyncio.StreamWriter, dict[str, Any]], Awaitable[None]]


class ScriptedServer:
    """HTTP/1.1 on a loopback port, written by hand: each request is answered by `respond`, connections are
    counted and kept alive, and `client_left` is set when a client closes its connection."""

    def __init__(self, respond: Respond) -> None:
        self.respond = respond
        self.connections = 0
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self.client_left = asyncio.Event()

    async def __aenter__(self) -> ScriptedServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.base_url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode()
                start, *lines = head.strip().split("\r\n")
                headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines)}
                body = json.loads(await reader.readexactly(int(headers["content-length"])))
                self.requests.append((start, headers, body))
                await self.respond(reader, writer, body)
        except (asyncio.IncompleteReadError, ConnectionError):
            self.client_left.set()
        finally:
            writer.close()


def _event(payload: dict[str, Any] | str) -> bytes:
    return f"data: {payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)}\n\n".encode()


def _chunk(content: str | None = None, finish: str | None = None, **delta: Any) -> dict[str, Any]:
    if content is not None:
        delta["content"] = content
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        "usage": None,
    }


USAGE = {
    "id": "chatcmpl-scripted",
    "object": "chat.completion.chunk",
    "choices": [],
    "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
}


async def _stream(writer: asyncio.StreamWriter, pieces: list[bytes], status: str = "200 OK") -> None:
    """A chunked response of `pieces`, each in its own write and, after a pause, its own read by the client."""
    writer.write(f"HTTP/1.1 {status}\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
    for piece in pieces:
        writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        await writer.drain()
        await asyncio.sleep(0.005)
    writer.write(b"0\r\n\r\n")
    await writer.drain()


def _split(data: bytes, *at: int) -> list[bytes]:
    cuts = sorted({0, *at, len(data)})
    return [data[a:b] for a, b in zip(cuts, cuts[1:])]


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: dict[str, Any]) -> None:
    await _stream(
        writer,
        [_event(_chunk("Hi", role="assistant")), _event(_chunk(" there", "stop")), _event(USAGE), b"data: [DONE]\n\n"],
    )


async def test_events_split_across_reads_among_keep_alives_are_read_whole() -> None:
    odd = "café ✓ ok"  # multi-byte characters, one of them cut between two reads
    wire = (
        b": keep-alive\r\n\r\n"
        + _event(_chunk(odd, role="assistant")).replace(b"\n", b"\r\n")
        + b"event: message\nid: 7\n"
        + _event(_chunk(" done", "stop"))
        + b":\n\n"
        + _event(USAGE)
        + b"data: [DONE]\n\n"
    )
    cut_in_euro = wire.index("✓".encode()) + 1
    pieces = _split(wire, 3, wire.index(b"data:") + 3, cut_in_euro, wire.index(b" done"), len(wire) - 20)

    async def respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: dict[str, Any]) -> None:
        await _stream(writer, pieces)

    async with ScriptedServer(respond) as server:
        deltas = await _deltas(_route(server.base_url), _request(TEXT))
    assert _seen(deltas) == [(odd, (), None, None), (" done", (), "stop", None), ("", (), None, (12, 3))]
    assert {d.response_id for d in deltas} == {"chatcmpl-scripted"}


async def test_the_request_is_what_litellm_sends_for_hosted_vllm() -> None:
    async with ScriptedServer(_answer) as server:
        await _deltas(_route(server.base_url), _request(TEXT))
        kept = [*TEXT, {"role": "assistant", "content": "Report"}]
        await _deltas(_route(server.base_url), _request(kept, [SEARCH], max_tokens=7, continue_final_message=True))
    (first_line, headers, plain), (_, _, continuing) = server.requests
    assert first_line == "POST /v1/chat/completions HTTP/1.1"
    assert headers["authorization"] == "Bearer berth-test" and headers["x-berth-task"] == "stream-test"
    assert plain == {
        "model": MODEL,
        "messages": TEXT,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 64,
    }
    assert continuing == {
        "model": MODEL,
        "messages": kept,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 7,
        "tools": [SEARCH],
        "continue_final_message": True,
        "add_generation_prompt": False,
    }


async def test_one_connection_serves_the_loop_s_calls_one_after_another() -> None:
    async with ScriptedServer(_answer) as server:
        await _deltas(_route(server.base_url), _request(TEXT))
        stream = await open_stream(_route(server.base_url), _request(TEXT))
        try:
            async for delta in stream:
                if delta.usage is not None:
                    break  # as the LLM step stops: at the usage, before the stream says it ended
        finally:
            await stream.aclose()
        await _deltas(_route(server.base_url), _request(TEXT))
    assert len(server.requests) == 3 and server.connections == 1


async def test_closing_midway_closes_the_connection() -> None:
    async def respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: dict[str, Any]) -> None:
        await _stream(writer, [_event(_chunk("Hi", role="assistant"))])  # the body never ends by itself...
        await reader.read()  # ...the server waits for the client to go

    async with ScriptedServer(respond) as server:
        stream = await open_stream(_route(server.base_url), _request(TEXT))
        try:
            assert (await stream.__anext__()).text == "Hi"
        finally:
            await stream.aclose()
        await asyncio.wait_for(server.client_left.wait(), 10)


@pytest.mark.parametrize(
    "status, body, message",
    [
        (
            "400 Bad Request",
            json.dumps(
                {
                    "error": {
                        "message": "messages.0.role: bad",
                        "type": "BadRequestError",
                        "param": "messages.0.role",
                        "code": 400,
                    }
                }
            ),
            "messages.0.role: bad",
        ),
        (
            "400 Bad Request",
            json.dumps({"object": "error", "message": "too long", "type": "BadRequestError", "code": 400}),
            "too long",
        ),  # vLLM's older form
        ("503 Service Unavailable", "overloaded, try later", "overloaded, try later"),
        ("422 Unprocessable Entity", json.dumps({"detail": "x" * 20_000}), "x" * 100),
    ],
)
async def test_an_error_status_raises_with_the_engine_s_message(status: str, body: str, message: str) -> None:
    async def respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: dict[str, Any]) -> None:
        raw = body.encode()
        writer.write(
            f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(raw)}\r\n\r\n".encode() + raw
        )
        await writer.drain()

    async with ScriptedServer(respond) as server:
        with pytest.raises(ModelCallError) as refused:
            await open_stream(_route(server.base_url), _request(TEXT))
    assert refused.value.status_code == int(status.split()[0])
    assert message in str(refused.value) and len(str(refused.value)) < 700


async def test_an_error_event_midway_raises_with_its_code() -> None:
    async def respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: dict[str, Any]) -> None:
        await _stream(
            writer,
            [
                _event(_chunk("Hi", role="assistant")),
                _event({"error": {"message": "engine died", "type": "InternalServerError", "code": 500}}),
            ],
        )

    async with ScriptedServer(respond) as server:
        stream = await open_stream(_route(server.base_url), _request(TEXT))
        try:
            with pytest.raises(ModelCallError, match="engine died") as failed:
                [delta async for delta in stream]
        finally:
            await stream.aclose()
    assert failed.value.status_code == 500


async def test_a_connection_cut_midway_raises_without_a_status() -> None:
    async def respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: dict[str, Any]) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        piece = _event(_chunk("Hi", role="assistant"))
        writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        await writer.drain()
        writer.transport.abort()  # gone, mid-body

    async with ScriptedServer(respond) as server:
        stream = await open_stream(_route(server.base_url), _request(TEXT))
        try:
            with pytest.raises(ModelCallError, match="broke off") as failed:
                [delta async for delta in stream]
        finally:
            await stream.aclose()
    assert failed.value.status_code is None
