"""A small stdio MCP server for tests, built with the official `mcp.server.MCPServer`.

Every call appends a JSON line to the journal file named by ECHO_JOURNAL (tool, the
idempotency key from the request's `_meta`, this process's id, and, for `whoami`, the
BERTH_API_KEY it was started with), so a test can see what reached the server and how often.
ECHO_TOOLS (comma-separated) keeps only those tools: the simulated model calls every tool offered.
With ECHO_HTTP_PORT it serves streamable HTTP on that port (at /mcp) instead of stdio, and
journals each call's Authorization header.
"""

from __future__ import annotations

import atexit
import json
import os
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("echo")


def journal(tool: str, ctx: Context | None = None, **extra: object) -> int:
    """Write a line for this call; returns how many calls of `tool` with this key came before it."""
    meta = ctx.request_context.meta if ctx is not None else None
    key = (meta or {}).get("berth/idempotency_key")
    if ctx is not None and ctx.headers is not None:
        extra["authorization"] = ctx.headers.get("authorization")
    path = os.environ["ECHO_JOURNAL"]
    seen = 0
    if os.path.exists(path):
        with open(path) as f:
            seen = sum(1 for line in f if (e := json.loads(line))["tool"] == tool and e["key"] == key)
    with open(path, "a") as f:
        f.write(json.dumps({"tool": tool, "key": key, "pid": os.getpid(), **extra}) + "\n")
    return seen


def lookup(topic: str, ctx: Context) -> str:
    """Look a topic up in the archive."""
    journal("lookup", ctx)
    return f"archive says {topic}: 4.8 TB/s"


def flaky(topic: str, ctx: Context) -> str:
    """Answers on the second try of each call."""
    if journal("flaky", ctx) == 0:
        raise ToolError("busy, try again")
    return f"flaky answered on {topic}"


def broken(topic: str, ctx: Context) -> str:
    """Always fails."""
    journal("broken", ctx)
    raise ToolError(f"the archive is offline for {topic}")


def whoami(ctx: Context) -> str:
    """Says that it ran (the key it holds goes to the journal only)."""
    journal("whoami", ctx, token=os.environ.get("BERTH_API_KEY"), api=os.environ.get("BERTH_API_URL"))
    return "whoami ran"


def crash(ctx: Context) -> str:
    """Ends this process in the middle of the call, as a server that crashed."""
    journal("crash", ctx)
    os._exit(3)


if __name__ == "__main__":
    wanted = os.environ["ECHO_TOOLS"].split(",")
    for fn in (lookup, flaky, broken, whoami, crash):
        if fn.__name__ in wanted:
            server.add_tool(fn)
    atexit.register(lambda: journal("exit"))
    if "ECHO_HTTP_PORT" in os.environ:
        sys.exit(server.run("streamable-http", host="127.0.0.1", port=int(os.environ["ECHO_HTTP_PORT"])))
    sys.exit(server.run())
