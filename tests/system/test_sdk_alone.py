"""The SDK as an author installs it: its own wheel in a fresh virtualenv, an example run against `berth up`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.system.conftest import Stack

pytestmark = pytest.mark.system

# What the SDK needs, no more: a fresh environment with the wheel shows any import of the platform.
SDK_ONLY_BUDGET_MIB = 200


def _uv() -> str:
    found = shutil.which("uv", path=str(Path(sys.executable).parent))
    assert found, "uv is installed with the project's venv (make)"
    return found


@pytest.fixture(scope="module")
def sdk_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv holding only the berth-sdk wheel and its dependencies."""
    where = tmp_path_factory.mktemp("sdk-alone")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(where / "wheel"), str(ROOT / "sdk")],
        check=True,
        cwd=where,
    )
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where / "venv")], check=True)
    python = where / "venv" / "bin" / "python"
    wheel = next((where / "wheel").glob("berth_sdk-*.whl"))
    # The lock's versions (what the suite already tested, and already in uv's cache), so no new release intrudes.
    subprocess.run(
        [
            _uv(),
            "pip",
            "install",
            "--quiet",
            "--native-tls",
            "--compile-bytecode",
            "--python",
            str(python),
            "--constraint",
            str(ROOT / "requirements.lock"),
            str(wheel),
        ],
        check=True,
    )
    for leftover in ("build", "berth_sdk.egg-info"):  # setuptools builds in the source tree
        shutil.rmtree(ROOT / "sdk" / leftover, ignore_errors=True)
    return python


def test_the_sdk_wheel_holds_the_sdk_alone_and_runs_the_typed_example_against_a_stack(
    sdk_python: Path, stack: Stack, tmp_path: Path
) -> None:
    probe = (
        "import importlib.util as u, sys, sdk; print(sdk.__file__);"
        " print([m for m in ('orchestrator', 'workflows', 'activities', 'fastapi', 'litellm', 'sqlmodel')"
        " if u.find_spec(m)])"
    )
    where, platform = subprocess.run(
        [str(sdk_python), "-c", probe], capture_output=True, text=True, check=True, cwd=tmp_path
    ).stdout.splitlines()
    assert "site-packages" in where and platform == "[]"
    site = Path(where).parents[1]
    size_mib = sum(f.stat().st_size for f in site.rglob("*") if f.is_file()) / 2**20
    assert size_mib < SDK_ONLY_BUDGET_MIB, f"the SDK alone installs {size_mib:.0f} MiB"

    shutil.copy(ROOT / "examples" / "typed_output.py", tmp_path / "typed_output.py")  # run away from the source tree
    env = {**stack.env, "TEMPORAL_ADDRESS": f"127.0.0.1:{stack.env['BERTH_TEMPORAL_PORT']}"}
    ran = subprocess.run(
        [str(sdk_python), "typed_output.py", "H100 memory bandwidth"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=600,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    task_id, type_name, body = ran.stdout.strip().splitlines()[-1].split(" ", 2)
    assert type_name == "Finding" and 1 <= json.loads(body)["confidence"] <= 5
    state = stack.http.get(f"/v1/tasks/{task_id}").json()
    assert state["status"] == "completed" and json.loads(state["result"]) == json.loads(body)
