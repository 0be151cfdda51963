"""A submit that races this process's serve() waits for the registration instead of failing 'not registered'."""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest

from sdk import Client, InvalidSpec
from sdk import _registering as registering

NOT_REGISTERED = {"error": {"code": "invalid", "message": "agent 'clerk' is not registered", "field": "agent"}}
STATE = {
    "task_id": "default:t1",
    "agent": "clerk",
    "agent_version": "v1",
    "model": "llama-3.1-8b",
    "tenant": "default",
    "status": "queued",
    "step": 0,
    "max_steps": 5,
    "spend": {"token_limit": 100},
    "updated_at": "2026-12-03T00:00:00Z",
}


def api(registered: threading.Event) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        if registered.is_set():
            return httpx.Response(201, json=STATE)
        return httpx.Response(422, json=NOT_REGISTERED)

    return httpx.MockTransport(answer)


async def test_a_submit_during_serves_registration_is_sent_again_once_it_is_done() -> None:
    registered = threading.Event()
    registering.begin(["clerk"])

    def register_later() -> None:
        registered.wait(0.3)
        registered.set()
        registering.done("clerk")

    threading.Thread(target=register_later).start()
    async with Client("http://berth", transport=api(registered)) as client:
        handle = await client.submit("clerk", "file it", 100)
    assert handle.task_id == "default:t1"


async def test_without_a_serve_at_it_the_refusal_comes_at_once() -> None:
    async with Client("http://berth", transport=api(threading.Event())) as client:
        with pytest.raises(InvalidSpec) as refused:
            await asyncio.wait_for(client.submit("clerk", "file it", 100), timeout=5)
    assert refused.value.field == "agent"
