"""The agent registry: content versions, the current one, and the old ones kept."""

from __future__ import annotations

import pytest

from orchestrator.store import Store
from sdk import AgentSpec, ToolSpec

pytestmark = pytest.mark.postgresql  # the store's SQL must mean the same on SQLite and PostgreSQL


def _agent(instructions: str = "Be brief.", name: str = "writer") -> AgentSpec:
    return AgentSpec(name=name, model="sim-small", instructions=instructions, tools=[ToolSpec(name="search")])


def test_register_fills_the_version_and_is_a_no_op_for_the_same_content(store: Store) -> None:
    first = store.agents.register(_agent())
    assert first.version == _agent().content_version() and first.version
    assert store.agents.register(_agent().model_copy(update={"version": "ignored"})) == first
    assert store.agents.versions("writer") == [first.version]
    assert store.agents.get("writer") == first


def test_a_new_version_becomes_current_and_old_ones_are_kept(store: Store) -> None:
    v1 = store.agents.register(_agent("Be brief."))
    v2 = store.agents.register(_agent("Be thorough."))
    assert v1.version != v2.version
    assert store.agents.get("writer") == v2
    assert store.agents.get("writer", v1.version) == v1
    assert store.agents.versions("writer") == [v1.version, v2.version]

    # Registering the old content again (a rollback) makes it current; nothing is duplicated.
    assert store.agents.register(_agent("Be brief.")) == v1
    assert store.agents.get("writer") == v1
    assert store.agents.versions("writer") == [v1.version, v2.version]


def test_list_shows_the_current_version_of_each_agent(store: Store) -> None:
    store.agents.register(_agent("one"))
    current_writer = store.agents.register(_agent("two"))
    coder = store.agents.register(_agent("code", name="coder"))
    assert store.agents.list() == [coder, current_writer]


def test_unknown_agents_and_versions(store: Store) -> None:
    assert store.agents.get("nobody") is None
    store.agents.register(_agent())
    assert store.agents.get("writer", "0000") is None
    assert store.agents.versions("nobody") == []
    assert store.agents.list() == [store.agents.get("writer")]
