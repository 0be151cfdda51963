"""Who is calling: the key, its role, and the one tenant it is confined to (None: every tenant)."""

from __future__ import annotations

from dataclasses import dataclass

from sdk._identity import Role

# Roles by what they may do; each route names the set it needs (viewers are refused every
# write before any route runs, in auth.authenticate).
TASK_WRITERS = frozenset({Role.admin, Role.operator, Role.agent})
OPERATORS = frozenset({Role.admin, Role.operator})
ADMINS = frozenset({Role.admin})


@dataclass(frozen=True)
class Principal:
    key_id: str
    role: Role
    tenant: str | None

    def sees(self, tenant: str) -> bool:
        """Whether this caller may see (and, by role, act on) a task of `tenant`."""
        return self.tenant is None or self.tenant == tenant
