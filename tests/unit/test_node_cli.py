"""`berth node` refuses bad setups with one `error: …` line and exit status 2, before touching the network."""

from __future__ import annotations

import pytest

from orchestrator.cli.main import main


@pytest.mark.parametrize(
    "argv, start",
    [
        (["--simulate", "3xB999-1GB", "--join-token", "t"], "error: simulate: unknown GPU type 'B999-1GB'"),
        (["--simulate", "1xH100-80GB"], "error: join-token: give --join-token or set BERTH_JOIN_TOKEN"),
        (["--simulate", "1xH100-80GB", "--join-token", "t", "--label", "oops"], "error: label: expected K=V"),
        (["--simulate", "1xH100-80GB", "--join-token", "t", "--heartbeat-s", "0"], "error: heartbeat-s: must be > 0"),
    ],
)
def test_bad_setups_end_with_one_error_line(
    argv: list[str], start: str, tmp_path, monkeypatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("BERTH_JOIN_TOKEN", raising=False)
    code = main(["node", "--node-id", "gpu-x", "--data-dir", str(tmp_path), *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith(start), err
