"""Where benchmark figures go: one JSON file per benchmark, with the machine it ran on."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def write_results(name: str, figures: dict, file: str | None = None) -> Path:
    """`figures` as RESULTS/<file or name>.json; `file` puts one of a benchmark's several runs in a folder of
    its own (simulator/steady/seed-0)."""
    path = RESULTS / f"{file or name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "benchmark": name,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        **figures,
    }
    path.write_text(json.dumps(body, indent=2) + "\n")
    return path


def write_labelled_run(name: str, label: str, figures: dict) -> Path:
    """Keep `figures` as the run `label` of benchmark `name`, beside its other runs (a "before" and an "after")."""
    path = RESULTS / f"{name}.json"
    runs = json.loads(path.read_text()).get("runs", {}) if path.exists() else {}
    runs[label] = figures
    return write_results(name, {"runs": runs})
