"""The admin UI's sign-in lockout, played by a stranger who knows a key id (it is in every refusal and the
audit log) and sends wrong secrets for it: the stranger is locked out, the key's holder is not.

Each party is a browser at its own client address, calling the real app in-process.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import httpx
import pytest

from orchestrator.store import Store
from orchestrator.store.keys import split_key
from orchestrator.ui.login import ADDRESS_FAILED_LOGIN_BURST, FAILED_LOGIN_BURST
from sdk.wire.identity import Role

Browser = Callable[[str], AbstractAsyncContextManager[httpx.AsyncClient]]


@pytest.fixture
def browser_at(app) -> Browser:
    """`async with browser_at("10.0.0.7") as browser:` — a cookie-keeping browser whose requests come from there."""

    @asynccontextmanager
    async def make(address: str) -> AsyncIterator[httpx.AsyncClient]:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app, client=(address, 40_000)), base_url="http://berth"
        ) as browser:
            yield browser

    return make


async def _sign_in(browser: httpx.AsyncClient, key: str) -> httpx.Response:
    form = await browser.get("/login")
    token = re.search(r'name="csrf_token" value="([^"]+)"', form.text).group(1)  # type: ignore[union-attr]
    return await browser.post("/login", data={"api_key": key, "csrf_token": token})


async def test_wrong_secrets_for_a_key_id_lock_out_the_stranger_not_the_keys_holder(
    browser_at: Browser, store: Store
) -> None:
    holder_key = store.keys.create(Role.admin, name="the holder").key
    key_id = split_key(holder_key)[0]  # type: ignore[index]
    async with browser_at("10.0.0.66") as stranger:
        for attempt in range(FAILED_LOGIN_BURST):
            wrong = await _sign_in(stranger, f"berth_{key_id}_guess{attempt}")
            assert wrong.status_code == 401, wrong.text[:300]
        assert (await _sign_in(stranger, f"berth_{key_id}_one-more")).status_code == 429
        # Locked out for that key id from there, even with the right secret: the guessing is what is slowed.
        assert (await _sign_in(stranger, holder_key)).status_code == 429
    async with browser_at("10.0.0.7") as holder:
        signed = await _sign_in(holder, holder_key)
        assert signed.status_code == 303, signed.text[:300]
        assert (await holder.get("/")).status_code == 200


async def test_an_address_trying_many_keys_is_locked_out_of_every_key(browser_at: Browser, store: Store) -> None:
    async with browser_at("10.0.0.99") as sprayer:
        for attempt in range(ADDRESS_FAILED_LOGIN_BURST):
            wrong = await _sign_in(sprayer, f"berth_{attempt:012x}_guess")
            assert wrong.status_code == 401, wrong.text[:300]
        locked = await _sign_in(sprayer, store.keys.create(Role.viewer, name="never tried here").key)
        assert locked.status_code == 429 and "too many failed sign-ins" in locked.text
    async with browser_at("10.0.0.100") as neighbour:
        assert (await _sign_in(neighbour, store.keys.create(Role.viewer).key)).status_code == 303


async def test_a_concurrent_burst_gets_no_more_attempts_than_the_limits(browser_at: Browser, store: Store) -> None:
    """Checked before the key lookup and counted after it, 40 attempts sent at once all passed a limit of 30."""
    holder_key = store.keys.create(Role.admin, name="the holder").key
    key_id = split_key(holder_key)[0]  # type: ignore[index]
    async with browser_at("10.0.0.66") as stranger:
        form = await stranger.get("/login")
        token = re.search(r'name="csrf_token" value="([^"]+)"', form.text).group(1)  # type: ignore[union-attr]

        async def guess(key: str) -> int:
            return (await stranger.post("/login", data={"api_key": key, "csrf_token": token})).status_code

        one_key = await asyncio.gather(*(guess(f"berth_{key_id}_guess{i}") for i in range(FAILED_LOGIN_BURST + 15)))
        assert sorted(set(one_key)) == [401, 429] and one_key.count(401) == FAILED_LOGIN_BURST
    async with browser_at("10.0.0.99") as sprayer:
        form = await sprayer.get("/login")
        token = re.search(r'name="csrf_token" value="([^"]+)"', form.text).group(1)  # type: ignore[union-attr]
        many = await asyncio.gather(
            *(
                sprayer.post("/login", data={"api_key": f"berth_{i:012x}_guess", "csrf_token": token})
                for i in range(ADDRESS_FAILED_LOGIN_BURST + 15)
            )
        )
        assert [r.status_code for r in many].count(401) == ADDRESS_FAILED_LOGIN_BURST
    async with browser_at("10.0.0.7") as holder:
        assert (await _sign_in(holder, holder_key)).status_code == 303  # the holder elsewhere is not slowed
