"""The rule of docs/workflow-changes.md, where a machine can check it: no workflow calls `workflow.patched()` or
reads Temporal's continue-as-new hint itself (both answer for the workflow task the code lands in, which a
query can shift past a local activity); the legacy patch reader and the EventClock are the one place each."""

from __future__ import annotations

import ast
from pathlib import Path

WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"
ALLOWED = {
    "patched": {"code_versions.py"},
    "deprecate_patch": set(),
    "is_continue_as_new_suggested": {"event_clock.py"},
}


def _calls(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            names.add(node.func.attr)
    return names


def test_no_workflow_reads_a_patch_or_the_continue_as_new_hint_outside_its_one_place() -> None:
    breaches = [
        f"workflows/{path.name} calls {name}()"
        for path in sorted(WORKFLOWS.glob("*.py"))
        for name, allowed in ALLOWED.items()
        if name in _calls(path) and path.name not in allowed
    ]
    assert breaches == []


def test_every_task_run_the_workflows_start_names_its_version() -> None:
    """A TaskRun built without `workflow_version` is a version-0 run: legacy rules for a brand-new run."""
    unnamed = []
    for path in sorted(WORKFLOWS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "TaskRun":
                if "workflow_version" not in {k.arg for k in node.keywords}:
                    unnamed.append(f"workflows/{path.name}:{node.lineno}")
    assert unnamed == []


# A class a newcomer can read in a sitting: what a phase decides lives in functions of (state, outcome) beside it
# (step_outcomes, own_loop_rules, fleet_round, fleet_recovery, fleet_settle), which unit tests call directly.
MAX_CLASS_LINES = 300


def test_no_workflow_class_outgrows_a_sitting() -> None:
    oversized = [
        f"workflows/{path.name}: {node.name} is {node.end_lineno - node.lineno + 1} lines"
        for path in sorted(WORKFLOWS.glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef) and node.end_lineno is not None
        if node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES
    ]
    assert oversized == []
