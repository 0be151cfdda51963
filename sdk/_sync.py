"""The blocking `SyncClient` and `SyncTaskHandle`, for scripts and notebooks: the async ones, run to completion.

    from sdk import SyncClient, Budget

    with SyncClient() as client:
        task = client.submit("researcher", "find three sources", budget=Budget(tokens=20_000))
        for event in task.events():
            print(event.kind, event.data)
        print(task.result())

Nothing here re-implements a request. Each blocking method is one line, `blocking(Client.name)` (or
`blocking_handle(...)` for a method that gives a task handle): it calls the async method and runs what comes back
on a private event loop in a background thread (so the blocking API also works where an event loop is already
running, as in Jupyter), and gives the result in blocking form: a `TaskHandle` as a `SyncTaskHandle`, an async
stream of events as a blocking iterator. Errors are the async method's own; arguments, defaults and docstrings
are its own too.

Why a line per method and not a loop over `Client`'s methods: Python's types cannot say "every coroutine method
of that class, blocking", so methods made in a loop would be invisible to mypy and to an IDE. Typed through
`ParamSpec`, `blocking(Client.tasks)` has `tasks`' parameters exactly and its result in blocking form, so a type
checker sees every method; and `help()` shows the blocking result (`_twin_of`). tests/unit/test_sync_twins.py
fails on an async method that has no line here.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
import typing
from collections.abc import AsyncGenerator, Callable, Coroutine, Iterator
from typing import Any, Concatenate, ParamSpec, TypeVar, overload

import httpx

from ._client import Client, TaskHandle

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


class _LoopThread:
    """An event loop running forever in a daemon thread; `run` blocks on one coroutine."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="berth-sdk-loop", daemon=True)
        self._thread.start()

    @property
    def closed(self) -> bool:
        return self._loop.is_closed()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result()
        except BaseException:
            # Ctrl-C in the caller must not leave the request running on in the background.
            future.cancel()
            raise

    def follow(self, stream: AsyncGenerator[T, None]) -> Iterator[T]:
        """An async stream read item by item on the loop; leaving the loop early closes the stream there."""
        try:
            while True:
                try:
                    yield self.run(stream.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            self.run(stream.aclose())

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


class _Blocking:
    """A blocking twin: the async object it drives, and the loop thread its coroutines run on."""

    _loop: _LoopThread
    _async: Any


@overload
def blocking(
    method: Callable[Concatenate[Any, P], AsyncGenerator[T, None]],
) -> Callable[Concatenate[_Blocking, P], Iterator[T]]: ...
@overload
def blocking(
    method: Callable[Concatenate[Any, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[_Blocking, P], R]: ...
def blocking(method: Callable[..., Any]) -> Callable[..., Any]:
    """The blocking twin of an async method: its coroutine run to the end, or its stream as an iterator."""
    returns = _returns(method)
    if returns is TaskHandle:
        raise TypeError(
            f"{method.__qualname__} returns a TaskHandle: its twin is blocking_handle({method.__qualname__})"
        )
    if typing.get_origin(returns) is AsyncGenerator:
        returns = typing.cast(Any, Iterator)[typing.get_args(returns)[0]]  # a type built at run time

    def run_to_completion(self: _Blocking, *args: Any, **kwargs: Any) -> Any:
        value = method(self._async, *args, **kwargs)
        return self._loop.follow(value) if isinstance(value, AsyncGenerator) else self._loop.run(value)

    return _twin_of(method, run_to_completion, returns)


# A method that gives a TaskHandle (or a coroutine of one) has its own adapter: as one overload of `blocking`,
# a method that returns `Any` (`TaskHandle.result`) would match it too, and mypy would then type that twin Any.
def blocking_handle(
    method: Callable[Concatenate[Any, P], Coroutine[Any, Any, TaskHandle] | TaskHandle],
) -> Callable[Concatenate[_Blocking, P], SyncTaskHandle]:
    """The blocking twin of a method that gives a `TaskHandle`: the handle, made blocking on the same loop."""
    if _returns(method) is not TaskHandle:
        raise TypeError(
            f"{method.__qualname__} does not return a TaskHandle: its twin is blocking({method.__qualname__})"
        )

    def hand_over(self: _Blocking, *args: P.args, **kwargs: P.kwargs) -> SyncTaskHandle:
        handle = method(self._async, *args, **kwargs)
        return SyncTaskHandle(self._loop, handle if isinstance(handle, TaskHandle) else self._loop.run(handle))

    return _twin_of(method, hand_over, "SyncTaskHandle")


def _returns(method: Callable[..., Any]) -> Any:
    return typing.get_type_hints(method).get("return", inspect.Signature.empty)


def _twin_of(method: Callable[..., Any], twin: Callable[..., T], returns: Any) -> Callable[..., T]:
    """`twin` named and documented as `method`: help() and IDEs read the async method's arguments and docstring,
    and the result the blocking one gives."""
    functools.update_wrapper(twin, method)
    twin.__signature__ = inspect.signature(method).replace(return_annotation=returns)  # type: ignore[attr-defined]  # inspect reads it; Callable does not declare it
    return twin


class SyncClient(_Blocking):
    """A blocking Berth API client; same arguments as `Client`. Close it (or use `with`)."""

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        timeout: float = 30,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._loop = _LoopThread()
        self._async: Client = Client(url, api_key, timeout, transport=transport)

    @property
    def url(self) -> str:
        return self._async.url

    @property
    def timeout(self) -> float:
        return self._async.timeout

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if not self._loop.closed:
            self._loop.run(self._async.aclose())
        self._loop.close()

    register = blocking(Client.register)
    agents = blocking(Client.agents)
    agent = blocking(Client.agent)
    models = blocking(Client.models)
    model = blocking(Client.model)
    put_model = blocking(Client.put_model)
    set_policy = blocking(Client.set_policy)
    prewarm = blocking(Client.prewarm)
    nodes = blocking(Client.nodes)
    node = blocking(Client.node)
    drain = blocking(Client.drain)
    preempt_node = blocking(Client.preempt_node)
    undrain = blocking(Client.undrain)
    admit_node = blocking(Client.admit_node)
    approve_node = blocking(Client.approve_node)
    set_node_trust = blocking(Client.set_node_trust)
    revoke_node = blocking(Client.revoke_node)
    remove_node = blocking(Client.remove_node)
    create_pool_token = blocking(Client.create_pool_token)
    pool_tokens = blocking(Client.pool_tokens)
    revoke_pool_token = blocking(Client.revoke_pool_token)
    replicas = blocking(Client.replicas)
    create_key = blocking(Client.create_key)
    keys = blocking(Client.keys)
    revoke_key = blocking(Client.revoke_key)
    create_tenant = blocking(Client.create_tenant)
    tenants = blocking(Client.tenants)
    tenant = blocking(Client.tenant)
    update_tenant = blocking(Client.update_tenant)
    audit = blocking(Client.audit)
    submit = blocking_handle(Client.submit)
    task = blocking_handle(Client.task)
    tasks = blocking(Client.tasks)


class SyncTaskHandle(_Blocking):
    """The blocking twin of `TaskHandle`; see there for what each method does."""

    def __init__(self, loop: _LoopThread, handle: TaskHandle) -> None:
        self._loop = loop
        self._async: TaskHandle = handle
        self.task_id = handle.task_id
        self.output_type = handle.output_type

    def __repr__(self) -> str:
        return f"SyncTaskHandle({self.task_id!r})"

    @property
    def openai_base_url(self) -> str:
        return self._async.openai_base_url

    status = blocking(TaskHandle.status)
    result = blocking(TaskHandle.result)
    stream = blocking(TaskHandle.stream)
    events = blocking(TaskHandle.events)
    writing = blocking(TaskHandle.writing)
    cancel = blocking(TaskHandle.cancel)
    raise_budget = blocking(TaskHandle.raise_budget)
    spawn = blocking_handle(TaskHandle.spawn)
    token = blocking(TaskHandle.token)
    answer = blocking(TaskHandle.answer)
    approve = blocking(TaskHandle.approve)
    reject = blocking(TaskHandle.reject)
    checkpoints = blocking(TaskHandle.checkpoints)
    checkpoint = blocking(TaskHandle.checkpoint)
    fork = blocking_handle(TaskHandle.fork)
    simulate_preemption = blocking(TaskHandle.simulate_preemption)
    kept_tool_result = blocking(TaskHandle.kept_tool_result)
    keep_tool_result = blocking(TaskHandle.keep_tool_result)
    finish = blocking(TaskHandle.finish)
    approvals = blocking(TaskHandle.approvals)
    ask_approval = blocking(TaskHandle.ask_approval)
    record_loop_trace = blocking(TaskHandle.record_loop_trace)
    interruptions = blocking(TaskHandle.interruptions)
    ledger = blocking(TaskHandle.ledger)
