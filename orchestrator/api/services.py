"""What every route needs, hung on the app once and handed to routes as a dependency."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from ..catalogue import ModelCatalogue
from ..config import BerthConfig
from ..store import Store, TaskRecord
from .errors import not_found
from .limits import KeyRateLimit
from .principal import Principal
from .temporal_gateway import TemporalGateway

T = TypeVar("T")


@dataclass(frozen=True)
class Services:
    config: BerthConfig
    store: Store
    temporal: TemporalGateway
    catalogue: ModelCatalogue
    submissions: KeyRateLimit

    async def db(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a (synchronous) store call in the thread pool, so a slow write never stalls the loop."""
        return await run_in_threadpool(fn, *args, **kwargs)

    async def task_record(self, task_id: str, caller: Principal) -> TaskRecord:
        """The task, when it exists and `caller` may see it.

        Another tenant's task is refused exactly as a missing one (404, same words): a caller
        must not learn from the answer that a task id exists outside its tenant.
        """
        record = await self.db(self.store.tasks.get, task_id)
        if record is None or not caller.sees_task(task_id, record.state.tenant):
            raise not_found(f"task {task_id!r} does not exist", field="task_id")
        return record


def services(request: Request) -> Services:
    return request.app.state.services


Svc = Annotated[Services, Depends(services)]
