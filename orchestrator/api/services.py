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
from .task_ids import TENANT_SEPARATOR, task_id_readings
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
            hint = ""
            if caller.tenant is None and TENANT_SEPARATOR not in task_id:
                hint = f" (a key of every tenant names a client-chosen id with its tenant: '<tenant>:{task_id}')"
            raise not_found(f"task {task_id!r} does not exist{hint}", field="task_id")
        return record

    async def task_id_meant(self, given: str, caller: Principal) -> str:
        """The id of the task `caller` means by `given`: its tenant's task `<tenant>:X` when it gives the `X` it
        chose at submission. Anything else (none of its tasks answers, a key of every tenant) stays as given,
        so the refusal names what the caller sent and says no more about other tenants than before.

        A key of every tenant must qualify a chosen id: `X` may be the chosen id of several tenants."""
        if caller.tenant is None:
            return given
        for task_id in task_id_readings(caller.tenant, given):
            record = await self.db(self.store.tasks.get, task_id)
            if record is not None and caller.sees_task(task_id, record.state.tenant):
                return task_id
        return given


def services(request: Request) -> Services:
    return request.app.state.services


Svc = Annotated[Services, Depends(services)]
