"""berth up's cluster join token: made once, kept private, reused, overridable."""

from __future__ import annotations

import stat
from pathlib import Path

from orchestrator.config import BerthConfig
from orchestrator.stack.up import cluster_join_token


def test_the_token_is_made_once_and_kept(tmp_path: Path) -> None:
    config = BerthConfig(data_dir=tmp_path)
    first = cluster_join_token(config)
    assert len(first) >= 32
    assert cluster_join_token(config) == first
    assert stat.S_IMODE((tmp_path / "join-token").stat().st_mode) == 0o600
    assert cluster_join_token(BerthConfig(data_dir=tmp_path, join_token="given")) == "given"
