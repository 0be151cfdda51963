"""What every route needs, hung on the app once and handed to routes as a dependency."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from ..catalogue import ModelCatalogue
from ..config import BerthConfig
from ..store import Store, TaskRecord
from .errors import not_found
from .temporal_gateway import TemporalGateway

T = TypeVar("T")


@dataclass(frozen=True)
class Services:
    config: BerthConfig
    store: Store
    temporal: TemporalGateway
    catalogue: ModelCatalogue

    async def db(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a (synchronous) store call in the thread pool, so a slow write never stalls the loop."""
        return await run_in_threadpool(fn, *args, **kwargs)

    async def task_record(self, task_id: str) -> TaskRecord:
        record = await self.db(self.store.tasks.get, task_id)
        if record is None:
            raise not_found(f"task {task_id!r} does not exist", field="task_id")
        return record


def services(request: Request) -> Services:
    return request.app.state.services
