"""An MCP server's tools as a model sees them: names it can call, results as text."""

from __future__ import annotations

import pytest
from mcp_types import CallToolResult, EmbeddedResource, ImageContent, TextContent, TextResourceContents

from sdk import InvalidSpec
from sdk._mcp_tools import mcp_tool_name, result_text


def test_mcp_tool_names_are_ones_a_model_can_call() -> None:
    assert mcp_tool_name("echo", "lookup") == "echo__lookup"
    assert mcp_tool_name("e", "x" * 61) == "e__" + "x" * 61
    for tool_name in ("x" * 62, "has.dot", "has space", ""):
        with pytest.raises(InvalidSpec) as refused:
            mcp_tool_name("e", tool_name)
        assert refused.value.field == f"mcp_servers.e.tools.{tool_name}"


def test_a_call_result_becomes_text_for_the_model() -> None:
    text = CallToolResult(
        content=[
            TextContent(type="text", text="[1, 2]"),
            TextContent(type="text", text=""),
            ImageContent(type="image", data="AAAA", mime_type="image/png"),
        ]
    )
    assert result_text(text) == "[1, 2]\n\n[image content]"
    resource = EmbeddedResource(type="resource", resource=TextResourceContents(uri="file:///a.txt", text="doc"))
    assert result_text(CallToolResult(content=[resource], structured_content={"n": 1})) == "doc"
    structured = CallToolResult(content=[], structured_content={"n": 2})
    assert result_text(structured) == '{"n": 2}'
