"""MCP servers in an agent's spec: refused by field at declaration, secrets kept out of every dump,
and versions of agents without MCP servers unchanged."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sdk import Agent, AgentSpec, InvalidSpec, McpServer, tool


@tool
def search(query: str, limit: int = 3) -> str:
    """Search the knowledge base."""
    return f"{query}:{limit}"


@pytest.mark.parametrize(
    "fields, where",
    [
        ({}, "url"),
        ({"command": ["srv"], "url": "https://mcp.example.org/mcp"}, "url"),
        ({"url": "ftp://mcp.example.org"}, "url"),
        ({"command": []}, "command"),
        ({"command": [" ", "x"]}, "command"),
        ({"url": "https://mcp.example.org/mcp", "env": {"K": "v"}}, "env"),
        ({"url": "https://mcp.example.org/mcp", "cwd": "/tmp"}, "cwd"),
        ({"command": ["srv"], "headers": {"Authorization": "Bearer x"}}, "headers"),
        ({"url": "https://mcp.example.org/mcp", "berth_token": True}, "berth_token"),
        ({"command": ["srv"], "name": "Echo"}, "name"),
        ({"command": ["srv"], "name": "has.dot"}, "name"),
        ({"command": ["srv"], "name": "9lives"}, "name"),
        ({"command": ["srv"], "name": "x" * 33}, "name"),
        ({"command": ["srv"], "timeout_s": 0}, "timeout_s"),
        ({"command": ["srv"], "surprise": 1}, "surprise"),
    ],
)
def test_a_bad_mcp_server_is_refused_naming_the_field(fields: dict, where: str) -> None:
    with pytest.raises(ValidationError) as refused:
        McpServer(**{"name": "echo"} | fields)
    assert where in {".".join(map(str, e["loc"])) for e in refused.value.errors()}


def test_an_agent_refuses_a_bad_mcp_server_with_the_field() -> None:
    with pytest.raises(InvalidSpec) as bad:
        Agent("a", "llama-3.1-8b", mcp_servers=[{"name": "echo"}])  # type: ignore[list-item]
    assert bad.value.field == "mcp_servers.0.url"
    twice = McpServer(name="echo", command=["srv"])
    with pytest.raises(InvalidSpec) as duplicated:
        Agent("a", "llama-3.1-8b", mcp_servers=[twice, twice])
    assert duplicated.value.field == "mcp_servers" and "echo" in duplicated.value.message


def test_env_and_headers_never_leave_the_authors_process() -> None:
    stdio = McpServer(name="files", command=["srv"], env={"FILES_KEY": "s3cret-env"})
    http = McpServer(
        name="web", url="https://user:pw@mcp.example.org/mcp?key=abc", headers={"Authorization": "Bearer s3cret-header"}
    )
    agent = Agent("a", "llama-3.1-8b", mcp_servers=[stdio, http])
    spec = agent.spec()
    assert spec.mcp_servers[0].env == {"FILES_KEY": "s3cret-env"}  # the tool worker still has them
    for shown in (spec.model_dump_json(), repr(spec), repr(agent), str(spec.model_dump())):
        assert "s3cret" not in shown
    assert AgentSpec.model_validate_json(spec.model_dump_json()).mcp_servers[1].headers == {}
    assert http.where == "https://mcp.example.org/mcp"


def test_agents_without_mcp_servers_keep_their_version() -> None:
    # The version this agent had before MCP servers were part of the spec: its registrations stay current.
    assert Agent("research", "llama-3.1-8b", "Research.", [search], allow_spawn=True).spec().version == "241860dc77b0"
    with_mcp = Agent(
        "research",
        "llama-3.1-8b",
        "Research.",
        [search],
        allow_spawn=True,
        mcp_servers=[McpServer(name="echo", command=["srv"])],
    )
    assert with_mcp.spec().version != "241860dc77b0"
    other_env = Agent(
        "research",
        "llama-3.1-8b",
        "Research.",
        [search],
        allow_spawn=True,
        mcp_servers=[McpServer(name="echo", command=["srv"], env={"K": "rotated"})],
    )
    assert other_env.spec().version == with_mcp.spec().version  # a rotated secret is not a new agent
