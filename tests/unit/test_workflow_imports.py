"""Workflows name the activities they call and never import them: importing the workflows loads no activity
implementation, no HTTP client and no telemetry, so the sandbox's view of workflow code is the workflow code."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT

NEVER = ("activities", "httpx", "opentelemetry", "litellm", "temporalio.client", "orchestrator")


def test_importing_the_workflows_loads_no_activity_http_client_or_telemetry() -> None:
    probe = "import json, sys; import workflows.agent_task, workflows.fleet_ops; print(json.dumps(sorted(sys.modules)))"
    loaded = json.loads(
        subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    )
    found = sorted(m for m in loaded if any(m == n or m.startswith(f"{n}.") for n in NEVER))
    assert found == [], f"importing the workflows loads {found}"
