"""Who is calling: the key, its role, and the one tenant it is confined to (None: every tenant)."""

from __future__ import annotations

from dataclasses import dataclass

from sdk.wire.identity import Role
from sdk.wire.limits import SUB_AGENT_MARK

# Roles by what they may do; each route names the set it needs (viewers are refused every
# write before any route runs, in auth.authenticate).
TASK_WRITERS = frozenset({Role.admin, Role.operator, Role.agent})
OPERATORS = frozenset({Role.admin, Role.operator})
FLEET_READERS = frozenset({Role.admin, Role.operator, Role.viewer})  # and of no tenant: auth.FleetReader
ADMINS = frozenset({Role.admin})


@dataclass(frozen=True)
class Principal:
    key_id: str
    role: Role
    tenant: str | None
    # A task token's task: the caller is that task (its tools, an MCP server it runs), confined to
    # it and its sub-agents, and whatever it starts is its sub-agent, paid from its budget.
    task_id: str | None = None

    def sees(self, tenant: str) -> bool:
        """Whether this caller may see (and, by role, act on) a task of `tenant`."""
        return self.tenant is None or self.tenant == tenant

    def sees_task(self, task_id: str, tenant: str) -> bool:
        """Whether this caller may see the task: of its tenant, and for a task token, in its own task's tree."""
        return self.sees(tenant) and (self.task_id is None or in_tree(self.task_id, task_id))


def in_tree(root: str, task_id: str) -> bool:
    """Whether `task_id` is `root` or one of its sub-agents. A sub-agent's id extends its parent's after a mark no
    client-chosen id holds (`<parent>~x1.<random>`), so no task a client submitted can pass for one."""
    return task_id == root or task_id.startswith(root + SUB_AGENT_MARK)
