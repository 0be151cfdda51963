"""What the in-process UI tests read off a page: the session's CSRF token and the flash a form left."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from html import unescape

import httpx

# `await sign_in(Role.viewer)`: a browser signed in with a new key of that role (the conftest fixture).
SignIn = Callable[..., Awaitable[httpx.AsyncClient]]


def csrf_of(page: httpx.Response) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert found, page.text[:500]
    return found.group(1)


def flash_of(page: httpx.Response) -> str:
    """'ok: …' or 'error: …', as the page says it (entities read back as the characters they stand for)."""
    found = re.search(r'<div id="flash" data-kind="(\w+)"[^>]*>([^<]*)</div>', page.text)
    assert found, page.text[:2000]
    return unescape(f"{found.group(1)}: {found.group(2)}")
