"""Whose task a submission is, and under what budget: the tenant rules applied before a task starts.

A caller confined to one tenant (an agent key, a scoped operator) submits for that tenant:
a spec that names no tenant is given it, one that names another is refused (403 on
`tenant`). The tenant must exist (422 on `tenant`). A spec without a budget gets the
tenant's default budget, and one with a token budget but no dollar limit gets the tenant's
default dollar limit: a tenant's defaults are how an admin caps tasks whose authors did
not think about cost.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field

from sdk import Budget, TaskSpec
from sdk.wire.identity import Tenant
from sdk.wire.limits import TASK_ID_PATTERN

from .errors import ApiError, invalid
from .principal import Principal
from .services import Services


class SubmitRequest(TaskSpec):
    """A TaskSpec whose budget may be left to the tenant's default."""

    model_config = ConfigDict(extra="forbid")

    task_id: str | None = Field(
        default=None,
        pattern=TASK_ID_PATTERN,
        description=(
            "an id of your choosing, scoped to the task's tenant: the task's id is `<tenant>:<task_id>`, and submitting"
            " it again with the same spec returns that task"
        ),
    )
    budget: Budget | None = Field(  # type: ignore[assignment]  # optional here; a TaskSpec always has one
        default=None, description="the task's limits; the tenant's default budget when absent"
    )


async def admit(svc: Services, caller: Principal, request: SubmitRequest) -> TaskSpec:
    """The spec to run: tenant settled and checked, budget completed from the tenant's defaults."""
    tenant_name = request.tenant
    if caller.tenant is not None:
        if "tenant" in request.model_fields_set and request.tenant != caller.tenant:
            raise ApiError(
                403,
                f"API key {caller.key_id} submits for tenant {caller.tenant!r} only, not {request.tenant!r}",
                field="tenant",
            )
        tenant_name = caller.tenant
    tenant = await svc.db(svc.store.tenants.get, tenant_name)
    if tenant is None:
        raise invalid("tenant", f"tenant {tenant_name!r} does not exist; an admin creates it (berth tenants create)")
    fields = {name: getattr(request, name) for name in TaskSpec.model_fields}
    return TaskSpec.model_validate({**fields, "tenant": tenant_name, "budget": _budget(request.budget, tenant)})


def _budget(given: Budget | None, tenant: Tenant) -> Budget:
    if given is None:
        if tenant.default_budget_tokens is None:
            raise invalid("budget", f"no budget given, and tenant {tenant.name!r} has no default budget")
        return Budget(tokens=tenant.default_budget_tokens, usd=tenant.default_budget_usd)
    if given.usd is None and tenant.default_budget_usd is not None:
        return given.model_copy(update={"usd": tenant.default_budget_usd})
    return given
