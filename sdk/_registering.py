"""Agents this process's `serve()` is registering: a submit that finds one not registered yet waits for it.

The obvious script starts `serve()` in the background and submits at once; the submit used to race the
registration ("agent … is not registered"). serve() marks its agents here before it reaches their MCP
servers and releases each once the API has it (or serve() gave up), so the submit asks again then.
A threading event, since SyncClient's loop and serve()'s may be different ones.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

REGISTRATION_WAIT_S = 120.0  # an agent's MCP servers are reached first: a slow one may take a while

_lock = threading.Lock()
_pending: dict[str, threading.Event] = {}


def begin(names: Iterable[str]) -> None:
    with _lock:
        for name in names:
            _pending.setdefault(name, threading.Event())


def done(name: str) -> None:
    with _lock:
        event = _pending.pop(name, None)
    if event is not None:
        event.set()


def wait(name: str, timeout_s: float = REGISTRATION_WAIT_S) -> bool:
    """Block until this process's serve() has registered `name` (True), or False at once when none is at it."""
    with _lock:
        event = _pending.get(name)
    return event is not None and event.wait(timeout_s)
