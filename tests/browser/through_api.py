"""What the browser tests set up through the API, as another client of the same stack would."""

from __future__ import annotations

from sdk import Budget, SyncClient, SyncTaskHandle, TaskStatus
from tests.system.conftest import Stack, wait_until

# Too small for even one call of the sample agents.
PARKED_TOKENS = 40


def admin_client(stack: Stack) -> SyncClient:
    return SyncClient(stack.api, stack.admin_key())


def park_for_budget(stack: Stack, task_id: str, text: str, agent: str = "research") -> SyncTaskHandle:
    """A task (of the research agent, unless told) that waits in awaiting_budget (for ten minutes) until its
    budget is raised: a task whose page can be opened before anything happens to it."""
    task = admin_client(stack).submit(
        agent, text, budget=Budget(tokens=PARKED_TOKENS), budget_grace_s=600, task_id=task_id
    )
    wait_until(lambda: task.status().status == TaskStatus.awaiting_budget, 60, f"{task_id} awaiting budget")
    return task


def make_key(stack: Stack, role: str, name: str) -> str:
    """A new API key of `role` (every tenant), made with the admin key as an admin would."""
    answer = stack.http.post("/v1/keys", json={"role": role, "name": name})
    assert answer.status_code == 201, answer.text
    return answer.json()["key"]
