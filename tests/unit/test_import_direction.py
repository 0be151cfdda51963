"""orchestrator's subpackages import one another one way: no two of them import each other, directly or
through others. A loop between packages means neither can be read, tested or changed without the other
(the API imported the UI while the UI's pages imported the API; the node's agent counted prompts with the
tokenizers while the tokenizers fetched their files through the node's fetchers)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ORCHESTRATOR = ROOT / "orchestrator"


def _subpackage(path: Path) -> str:
    return path.relative_to(ORCHESTRATOR).parts[0].removesuffix(".py")


def _imported(path: Path) -> Iterator[str]:
    """The orchestrator subpackages (or top-level modules) `path` imports, by name."""
    package = list(path.relative_to(ORCHESTRATOR).parts[:-1])
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level == 0:
            parts = (node.module or "").split(".")
            if parts[0] == "orchestrator" and len(parts) > 1:
                yield parts[1]
            continue
        base = package[: len(package) - (node.level - 1)] + ((node.module or "").split(".") if node.module else [])
        if base:
            yield base[0]
        else:  # `from .. import ui`: each name is a subpackage
            yield from (alias.name for alias in node.names)


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in ORCHESTRATOR.rglob("*.py"):
        source = _subpackage(path)
        graph.setdefault(source, set()).update(name for name in _imported(path) if name != source)
    return graph


def loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one subpackage (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_two_subpackages_of_orchestrator_import_each_other() -> None:
    graph = import_graph()
    assert {"api", "ui", "server", "node", "pool", "store"} <= set(graph)  # the scan sees the packages
    assert loops(graph) == []


def test_the_api_knows_nothing_of_the_pages_or_the_app_composed_over_it() -> None:
    assert import_graph()["api"].isdisjoint({"ui", "server", "mcp_server", "cli"})


def test_a_loop_is_found_through_a_third_package() -> None:
    assert loops({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert loops({"a": {"b"}, "b": set()}) == []
