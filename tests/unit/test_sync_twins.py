"""The blocking client and handle mirror the async ones name for name and argument for argument: a method added to
`Client` or `TaskHandle` and not to its twin (the own loop's `finish` once was) fails here, not in a user's script."""

from __future__ import annotations

import inspect
from collections.abc import AsyncGenerator, Generator, Iterator
from typing import Any, cast

import pytest

from sdk import Client, NotFound, SyncClient, TaskEvent
from sdk._client import TaskHandle
from sdk._sync import SyncTaskHandle, _Blocking, _LoopThread, blocking, blocking_handle

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


class _Counter:
    """An async API as small as can be: a coroutine, a stream, a refusal."""

    async def double(self, n: int, *, plus: int = 0) -> int:
        return 2 * n + plus

    def __init__(self) -> None:
        self.streams_closed = 0

    async def count(self, upto: int) -> AsyncGenerator[int, None]:
        try:
            for n in range(upto):
                yield n
        finally:
            self.streams_closed += 1

    async def refuse(self) -> None:
        raise NotFound("no such counter", field="counter_id", status_code=404)


class _SyncCounter(_Blocking):
    def __init__(self) -> None:
        self._loop = _LoopThread()
        self._async = _Counter()

    double = blocking(_Counter.double)
    count = blocking(_Counter.count)
    refuse = blocking(_Counter.refuse)


def test_an_async_method_is_blocking_by_one_line_with_its_arguments_result_and_errors() -> None:
    counter = _SyncCounter()
    try:
        assert counter.double(4, plus=1) == 9
        assert list(counter.count(3)) == [0, 1, 2]
        with pytest.raises(NotFound) as refused:
            counter.refuse()
        assert refused.value.field == "counter_id"
        assert str(inspect.signature(_SyncCounter.count)) == "(self, upto: 'int') -> collections.abc.Iterator[int]"
    finally:
        counter._loop.close()


async def test_the_blocking_twin_works_where_an_event_loop_already_runs() -> None:
    counter = _SyncCounter()  # as in a notebook: the caller's loop is running, the twin's runs on its own thread
    try:
        assert counter.double(1) == 2
        stream = counter.count(5)
        assert next(stream) == 0
        cast(Generator[int, None, None], stream).close()  # leaving early closes the async stream on the twin's loop
        assert counter._async.streams_closed == 1
    finally:
        counter._loop.close()


def test_help_shows_the_blocking_result() -> None:
    assert inspect.signature(SyncClient.submit).return_annotation == "SyncTaskHandle"
    assert inspect.signature(SyncTaskHandle.events).return_annotation == Iterator[TaskEvent]
    assert SyncTaskHandle.result.__doc__ == TaskHandle.result.__doc__


def test_a_method_that_gives_a_handle_needs_the_handle_adapter() -> None:
    with pytest.raises(TypeError, match="blocking_handle"):
        blocking(TaskHandle.spawn)
    with pytest.raises(TypeError, match="blocking"):
        blocking_handle(TaskHandle.status)  # type: ignore[arg-type]  # the mistake this test is about
