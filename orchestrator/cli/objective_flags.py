"""The latency objective flags of `berth submit` and `berth tenants create|update`: one set, one wording.

Values stay text until pydantic reads them (LatencyObjectives), so a refusal is the model's own, and is named
by the flag that gave the value.
"""

from __future__ import annotations

import argparse
from typing import Any

from sdk.wire.objectives import LatencyObjectives

OBJECTIVE_FLAGS = (
    ("ttft_s", "--ttft-s", "seconds from asking to the first token"),
    ("tpot_s", "--tpot-s", "seconds per output token after the first"),
    ("deadline_s", "--deadline-s", "seconds from submission to the task's answer"),
    ("attainment", "--attainment", "share of calls that must meet --ttft-s and --tpot-s (0.99: the p99)"),
)


def add_objective_flags(p: argparse.ArgumentParser, *, over: str, clearable: bool = False) -> None:
    """The four flags, each a latency objective set over `over` (what it inherits from when left out)."""
    group = p.add_argument_group("latency objectives", f"each one given is set over {over}")
    for field, flag, text in OBJECTIVE_FLAGS:
        group.add_argument(flag, dest=field, metavar="N", help=text + (" (none: clear it)" if clearable else ""))


def objectives_given(args: argparse.Namespace) -> dict[str, Any]:
    """The objective flags given, as text still ("none" meaning clear)."""
    values: dict[str, Any] = {}
    for field, _flag, _text in OBJECTIVE_FLAGS:
        given = getattr(args, field)
        if given is not None:
            values[field] = None if given.lower() == "none" else given
    return values


def objectives_of(args: argparse.Namespace) -> LatencyObjectives | None:
    """The objectives the flags set; None when none is given. Raises pydantic's ValidationError for a bad one."""
    values = objectives_given(args)
    return LatencyObjectives.model_validate(values) if values else None


def flag_of(field: str | None) -> str | None:
    """The flag that gave a refused field (`objectives.ttft_s` or `ttft_s` -> `ttft-s`); other fields as they are."""
    name = (field or "").removeprefix("objectives.")
    flags = {f: flag.removeprefix("--") for f, flag, _text in OBJECTIVE_FLAGS}
    return flags.get(name, field)
