"""The rendered Helm chart passes a static policy check of the kind Kubernetes teams run in CI: checkov's
Kubernetes checks (pinned in tests/deploy/checkov.lock; `make test` installs it in .venv/policy), over what Helm's own
engine renders from the chart with a minimal install's values and a production install's.

checkov's open-source checks carry no severity (those come from Prisma Cloud's service), so every failed check
counts: none may fail, on a production install's values or on a minimal one's with images by digest. The one finding
left is a minimal install's images by tag, which the operator closes by giving digests. Without checkov this fails,
never skips: a policy check that quietly does not run is no check.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.chart import MINIMAL, ROOT, VALUE_SETS, render_files

CHECKOV = ROOT / ".venv" / "policy" / "bin" / "checkov"
CHECKOV_VERSION = next(
    line.split("==")[1].strip()
    for line in (Path(__file__).parent / "checkov.lock").read_text().splitlines()
    if line.startswith("checkov==")
)


def checkov_failures(values: dict[str, Any], tmp_path: Path) -> list[tuple[str, str]]:
    """(check id, resource) of every failed checkov Kubernetes check over the chart rendered with `values`."""
    if not CHECKOV.exists():
        pytest.fail(f"checkov is missing at {CHECKOV}: `make test` installs it (or `make policy-tools`)", pytrace=False)
    for path, text in render_files(values).items():
        (tmp_path / Path(path).name).write_text(text)
    done = subprocess.run(
        [str(CHECKOV), "--directory", str(tmp_path), "--framework", "kubernetes", "--output", "json", "--quiet"]
        + ["--skip-download"],  # nothing fetched: the check is the pinned package's alone
        capture_output=True,
        text=True,
        timeout=240,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LOG_LEVEL": "ERROR"},
    )
    assert done.returncode in (0, 1), done.stderr[-2000:]  # 1: some check failed
    reports = json.loads(done.stdout or "[]")
    reports = reports if isinstance(reports, list) else [reports]
    assert any(r.get("check_type") == "kubernetes" for r in reports) or done.returncode == 0, done.stdout[-2000:]
    return sorted(
        (check["check_id"], check["resource"])
        for report in reports
        for check in report.get("results", {}).get("failed_checks", [])
    )


def test_checkov_is_the_pinned_version() -> None:
    if not CHECKOV.exists():
        pytest.fail(f"checkov is missing at {CHECKOV}: `make test` installs it (or `make policy-tools`)", pytrace=False)
    done = subprocess.run([str(CHECKOV), "--version"], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == CHECKOV_VERSION


@pytest.mark.parametrize("values", ["minimal-by-digest", "production"])
def test_the_rendered_chart_fails_no_policy_check(values: str, tmp_path: Path) -> None:
    # CKV_K8S_35 (secrets as files, not environment variables) included: every secret is a file of a mounted
    # Secret, named by its BERTH_*_FILE variable.
    failed = checkov_failures(VALUE_SETS[values], tmp_path)
    assert not failed, f"checkov {CHECKOV_VERSION} finds {len(failed)}: {failed}"


def test_images_by_tag_are_the_one_more_finding(tmp_path: Path) -> None:
    # The chart cannot know the digest of images the operator builds: by default it names them by tag (and pulls
    # them each start, since a tag can move). image.*.digest pins them, and then this finding goes.
    failed = {check for check, _ in checkov_failures(MINIMAL, tmp_path)}
    assert failed == {"CKV_K8S_43"}
