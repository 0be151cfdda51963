"""What `import sdk` costs an author who only submits and follows tasks: no Temporal worker, no MCP client."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_importing_the_sdk_loads_neither_temporal_nor_mcp_until_a_tool_worker_is_served() -> None:
    code = (
        "import sys, sdk; before = {m for m in ('temporalio', 'mcp') if m in sys.modules};"
        " from sdk import serve, serve_blocking; print(sorted(before), callable(serve) and callable(serve_blocking),"
        " 'temporalio' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] True True"


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    import sdk

    with pytest.raises(AttributeError, match="nothing_here"):
        sdk.nothing_here  # type: ignore[attr-defined]  # noqa: B018
