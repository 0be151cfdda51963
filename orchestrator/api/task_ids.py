"""Task ids belong to tenants.

A task's id is its workflow's id, which is global; a client-chosen id must still never let one
tenant take another's id, nor learn that it exists (a collision would answer "already used").
So an id a client chooses is scoped to the task's tenant: the task's id is `<tenant>:<chosen id>`
(given as is when it already starts so), and a resubmit within the tenant finds the same task.
Ids the server makes are random (`t-<48 bits>`), and a sub-agent's id extends its parent's after
a mark no client-chosen id may hold (sdk.wire.limits.SUB_AGENT_MARK), so no client can pre-empt one.

The id a client chose still names its task for the client: wherever a task id is taken, a caller of a tenant
may give it bare (`X` for `<tenant>:X`); `services.Services.task_id_meant` reads it so.
"""

from __future__ import annotations

import secrets

TENANT_SEPARATOR = ":"  # tenant names hold no colon (NAME_PATTERN)


def new_task_id() -> str:
    return "t-" + secrets.token_hex(6)


def scoped_task_id(tenant: str, chosen: str | None) -> str:
    """The id of a task of `tenant` submitted with the client-chosen id `chosen` (None: a new random one)."""
    if chosen is None:
        return new_task_id()
    prefix = tenant + TENANT_SEPARATOR
    return chosen if chosen.startswith(prefix) else prefix + chosen


def task_id_readings(tenant: str, given: str) -> tuple[str, ...]:
    """The ids a caller of `tenant` may mean by `given`, first match wins: the id as given (a server-made id,
    or one already qualified), then the id `given` became when the tenant chose it at submission."""
    scoped = scoped_task_id(tenant, given)
    return (given,) if scoped == given else (given, scoped)
