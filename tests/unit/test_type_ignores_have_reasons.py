"""Every `type: ignore` in the product names its error code and says why: mypy refuses a bare one
(`ignore-without-code`), and this refuses one without a reason, so each silenced error is a decision a reader
can check rather than a shrug."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("sdk", "workflows", "activities", "orchestrator")
# `# type: ignore[code]  # why`: a code, then a comment of words (mypy refuses `ignore[code]  (why)` outright).
REASONED = re.compile(r"type:\s*ignore\[[a-z0-9, -]+\]\s*#\s*\w")


def _unexplained(path: Path) -> list[str]:
    comments = (
        tok for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline) if tok.type == tokenize.COMMENT
    )
    return [
        f"{path.relative_to(ROOT)}:{tok.start[0]}: {tok.string}"
        for tok in comments
        if "type: ignore" in tok.string and not REASONED.search(tok.string)
    ]


def test_every_type_ignore_names_its_code_and_its_reason() -> None:
    found = [
        hit for package in PRODUCT for path in sorted((ROOT / package).rglob("*.py")) for hit in _unexplained(path)
    ]
    assert found == []


def test_the_rule_tells_a_reasoned_ignore_from_a_bare_one() -> None:
    assert REASONED.search("# type: ignore[arg-type]  # openai's stubs name only httpx2's client")
    assert not REASONED.search("# type: ignore[arg-type]  (validated by NodeRegistration)")
    assert not REASONED.search("# type: ignore[arg-type]")
    assert not REASONED.search("# type: ignore")
