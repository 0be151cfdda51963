"""Reading the simulator's JSON inputs (fleet and workload files) with errors that name the file or field."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError


def read_json(path: Path, label: str) -> object:
    """The decoded file; ValueError starting with `label` when it cannot be read or is not JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ValueError(f"{label}: cannot read {path}: {e.strerror}") from e
    except json.JSONDecodeError as e:
        raise ValueError(f"{label}: {path} is not JSON: line {e.lineno} column {e.colno}: {e.msg}") from e


def field_errors(label: str, exc: ValidationError) -> ValueError:
    """Every validation error as `label.field.path: reason`, joined: a user fixes them all in one go."""
    return ValueError("; ".join(f"{label}.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()))
