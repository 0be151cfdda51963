"""The blocking client and handle mirror the async ones name for name and argument for argument: a method added to
`Client` or `TaskHandle` and not to its twin (the own loop's `finish` once was) fails here, not in a user's script."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from sdk import Client, SyncClient
from sdk._client import TaskHandle
from sdk._sync import SyncTaskHandle

# What an async object has that its blocking twin says otherwise: closing, and `async with`.
ASYNC_ONLY = {"aclose": "close"}


def _public(cls: type) -> dict[str, Any]:
    return {name: value for name, value in inspect.getmembers(cls) if not name.startswith("_")}


def _instance_attributes(cls: type) -> set[str]:
    """Public attributes set in `__init__` (`self.task_id = ...`), read from its source."""
    source = inspect.getsource(cls.__init__)  # type: ignore[misc]  # a class's own __init__
    return {
        line.split("self.", 1)[1].split(" ")[0].split(",")[0]
        for line in source.splitlines()
        if line.strip().startswith("self.") and not line.strip().startswith("self._")
    }


@pytest.mark.parametrize("async_cls, sync_cls", [(Client, SyncClient), (TaskHandle, SyncTaskHandle)])
def test_the_blocking_twin_has_every_public_method_property_and_attribute(async_cls: type, sync_cls: type) -> None:
    wanted = {ASYNC_ONLY.get(name, name) for name in _public(async_cls)} | _instance_attributes(async_cls)
    have = set(_public(sync_cls)) | _instance_attributes(sync_cls)
    assert sorted(wanted - have) == []
    assert sorted(set(_public(sync_cls)) - wanted) == []  # nor anything its async twin lacks


@pytest.mark.parametrize("async_cls, sync_cls", [(Client, SyncClient), (TaskHandle, SyncTaskHandle)])
def test_each_twin_method_takes_the_same_arguments(async_cls: type, sync_cls: type) -> None:
    for name, method in _public(async_cls).items():
        twin = getattr(sync_cls, ASYNC_ONLY.get(name, name))
        if isinstance(method, property):
            assert isinstance(twin, property), name
            continue
        ours = [(p.name, p.kind, p.default) for p in inspect.signature(method).parameters.values()]
        theirs = [(p.name, p.kind, p.default) for p in inspect.signature(twin).parameters.values()]
        assert theirs == ours, name
