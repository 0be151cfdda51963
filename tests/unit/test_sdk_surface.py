"""The SDK's surface is sealed: authors import what `sdk.__all__` lists, Berth's own packages share the
wire through `sdk.wire`, and nothing outside the SDK reaches into its private `sdk._*` modules."""

from __future__ import annotations

import ast
import types
from pathlib import Path

import sdk

ROOT = Path(__file__).resolve().parents[2]
# Berth's own packages, and the code a user reads as an example: the SDK's tests may test its private parts.
PRODUCT = ("orchestrator", "workflows", "activities", "benchmarks", "examples")
NODE_WIRE = {
    "NodeHeartbeat",
    "NodeRegistration",
    "NodeRegistered",
    "ReplicaReport",
    "GpuDescription",
    "MigDeviceDescription",
    "NodeSpec",
    "CachedModelWeights",
    "TaskRun",
}


def _private_sdk_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("sdk._"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} from {node.module}")
            elif node.module == "sdk":
                found += [
                    f"{path.relative_to(ROOT)}:{node.lineno} sdk.{a.name}" for a in node.names if a.name.startswith("_")
                ]
        elif isinstance(node, ast.Import):
            found += [
                f"{path.relative_to(ROOT)}:{node.lineno} import {a.name}"
                for a in node.names
                if a.name.startswith("sdk._")
            ]
    return found


def test_no_product_package_imports_a_private_sdk_module() -> None:
    breaches = [
        hit
        for package in PRODUCT
        for path in sorted((ROOT / package).rglob("*.py"))
        for hit in _private_sdk_imports(path)
    ]
    assert breaches == []


def test_every_public_name_of_sdk_is_listed_and_every_listed_name_resolves() -> None:
    public = {
        name
        for name, value in vars(sdk).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name not in ("TYPE_CHECKING", "Any", "annotations")
    }
    assert public - set(sdk.__all__) == set()  # nothing reaches authors unlisted
    assert [name for name in sdk.__all__ if getattr(sdk, name, None) is None] == []
    assert len(sdk.__all__) == len(set(sdk.__all__))


def test_the_wire_between_berths_processes_is_not_the_authors_surface() -> None:
    assert NODE_WIRE & set(sdk.__all__) == set()
    from sdk.wire.fleet import NodeHeartbeat
    from sdk.wire.task_run import TaskRun

    assert NodeHeartbeat.__module__ == "sdk.wire.fleet" and TaskRun.__module__ == "sdk.wire.task_run"
