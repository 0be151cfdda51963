"""Reading the simulator's JSON inputs (fleet and workload files) with errors that name the file or field."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

# A fleet or workload file is objects in a list in an object ({"nodes": [{"count": 4}]} is 3 levels deep, a
# workload's model mix 4): 32 leaves room for any hand-written file, far below the ~1,000 levels past which
# Python's JSON decoder (and pydantic after it) would fail with a RecursionError instead of a refusal.
MAX_JSON_DEPTH = 32


def read_json(path: Path, label: str) -> object:
    """The decoded file; ValueError starting with `label` when it cannot be read, is not JSON or is nested
    deeper than MAX_JSON_DEPTH."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ValueError(f"{label}: cannot read {path}: {e.strerror}") from e
    except json.JSONDecodeError as e:
        raise ValueError(f"{label}: {path} is not JSON: line {e.lineno} column {e.colno}: {e.msg}") from e
    except RecursionError:
        raise ValueError(
            f"{label}: {path} is nested deeper than the decoder follows; at most {MAX_JSON_DEPTH} levels"
        ) from None
    depth = nesting_depth(value)
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"{label}: {path} is nested {depth:,} levels deep; at most {MAX_JSON_DEPTH} levels")
    return value


def nesting_depth(value: object) -> int:
    """How many lists and objects deep `value` goes (a number: 0, `[]`: 1), walked without recursion."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, level = pending.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is not None:
            deepest = max(deepest, level)
            pending.extend((child, level + 1) for child in children)
    return deepest


def field_errors(label: str, exc: ValidationError) -> ValueError:
    """Every validation error as `label.field.path: reason`, joined: a user fixes them all in one go."""
    return ValueError(
        "; ".join(f"{label}.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors())
    )
