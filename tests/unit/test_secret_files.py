"""Every secret setting may come from a file its `_FILE` variable names (a Kubernetes or Docker secret mounted as a
file), and each process refuses at start, in one line naming the variable, a secret given twice or a file it
cannot use: BERTH_ADMIN_KEY, BERTH_DATABASE_URL, BERTH_JOIN_TOKEN, BERTH_TEMPORAL_API_KEY (BerthConfig),
BERTH_API_KEY (the SDK's Client, the CLI and the tool worker) and a hosted model's provider key (its catalogue
entry's `api_key_env`, read when a call is routed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from orchestrator.catalogue import ModelCatalogue, UnknownModel
from orchestrator.cli import main as cli
from orchestrator.cli import tool_worker
from orchestrator.config import ENV_PREFIX, FILE_SUFFIX, SECRET_SETTINGS, BerthConfig, SecretSettingRefused
from orchestrator.stack.supervisor import child_environment
from sdk import Client
from sdk.secret_settings import secret_setting
from sdk.wire.identity import API_KEY_ENV

VARIABLES = [ENV_PREFIX + name.upper() for name in SECRET_SETTINGS] + [API_KEY_ENV]
ADMIN_KEY = "berth_0123456789ab_" + "s" * 43


@pytest.fixture(autouse=True)
def no_secrets_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in VARIABLES:
        monkeypatch.delenv(variable, raising=False)
        monkeypatch.delenv(variable + FILE_SUFFIX, raising=False)


def secret_file(tmp_path: Path, text: str, name: str = "secret") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def value_of(config: BerthConfig, name: str) -> object:
    value = getattr(config, name)
    return value.get_secret_value() if isinstance(value, SecretStr) else value


@pytest.mark.parametrize("name", SECRET_SETTINGS)
def test_each_secret_setting_is_read_from_its_file_without_the_trailing_newline(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_PREFIX + name.upper() + FILE_SUFFIX, str(secret_file(tmp_path, "s3cret-value\n")))
    assert value_of(BerthConfig.load(), name) == "s3cret-value"


def test_only_trailing_newlines_are_dropped(tmp_path: Path) -> None:
    path = secret_file(tmp_path, " spaced value\r\n\n")
    assert secret_setting("BERTH_X", {"BERTH_X_FILE": str(path)}) == " spaced value"
    assert secret_setting("BERTH_X", {"BERTH_X": "given"}) == "given"
    assert secret_setting("BERTH_X", {"BERTH_X": "", "BERTH_X_FILE": ""}) is None


@pytest.mark.parametrize("variable", VARIABLES)
def test_a_secret_given_as_its_value_and_as_a_file_is_refused_naming_both(variable: str, tmp_path: Path) -> None:
    environ = {variable: "one", variable + FILE_SUFFIX: str(secret_file(tmp_path, "other"))}
    with pytest.raises(SecretSettingRefused) as refused:
        secret_setting(variable, environ)
    assert refused.value.field == variable + FILE_SUFFIX
    assert f"{variable} and {variable}{FILE_SUFFIX} are both set" in str(refused.value)


def test_a_file_that_cannot_be_read_or_is_empty_is_refused_naming_the_file_variable(tmp_path: Path) -> None:
    cases = {
        str(tmp_path / "missing"): "cannot read",
        str(tmp_path): "cannot read",  # a directory: a Secret mounted where its key was expected
        str(secret_file(tmp_path, "\n", "blank")): "is empty",
        str(secret_file(tmp_path, "", "empty")): "is empty",
    }
    (tmp_path / "latin1").write_bytes(b"caf\xe9")
    cases[str(tmp_path / "latin1")] = "is not UTF-8 text"
    for path, reason in cases.items():
        with pytest.raises(SecretSettingRefused) as refused:
            secret_setting("BERTH_JOIN_TOKEN", {"BERTH_JOIN_TOKEN_FILE": path})
        message = str(refused.value)
        assert message.startswith("BERTH_JOIN_TOKEN_FILE: ") and reason in message and path in message, message
        assert "\n" not in message


def test_a_flag_wins_over_the_file_which_is_then_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `berth node --join-token T` beside a BERTH_JOIN_TOKEN_FILE: flags beat the environment, as for every setting.
    monkeypatch.setenv("BERTH_JOIN_TOKEN_FILE", str(tmp_path / "missing"))
    assert BerthConfig.load(join_token="from-the-flag").join_token == "from-the-flag"


@pytest.mark.parametrize(
    ("command", "variable"),
    [
        (["server"], "BERTH_ADMIN_KEY"),
        (["server"], "BERTH_DATABASE_URL"),
        (["worker"], "BERTH_DATABASE_URL"),
        (["worker"], "BERTH_TEMPORAL_API_KEY"),
        (["node", "--node-id", "n1", "--simulate", "1xA100"], "BERTH_JOIN_TOKEN"),
        (["worker", "--agents", "orchestrator.demo.sample_agents:ALL"], "BERTH_API_KEY"),
    ],
)
def test_each_process_stops_at_start_in_one_line_naming_both_variables(
    command: list[str],
    variable: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("BERTH_TEMPORAL_ADDRESS", "127.0.0.1:1")  # nothing is reached: it stops before connecting
    monkeypatch.setenv("BERTH_API_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("BERTH_WORKER_METRICS_PORT", "0")
    monkeypatch.setenv("BERTH_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv(variable, "one")
    monkeypatch.setenv(variable + FILE_SUFFIX, str(secret_file(tmp_path, "other")))
    assert cli.main(command) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"error: {variable}{FILE_SUFFIX}: {variable} and {variable}{FILE_SUFFIX} are both set: give the"
        " secret one way, as its value or as a file"
    ]


def test_a_server_refuses_an_unreadable_admin_key_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BERTH_ADMIN_KEY_FILE", str(tmp_path / "missing"))
    assert cli.main(["server"]) == 2
    assert capsys.readouterr().err.startswith("error: BERTH_ADMIN_KEY_FILE: cannot read ")


async def test_the_sdk_client_sends_the_key_from_its_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BERTH_API_KEY_FILE", str(secret_file(tmp_path, ADMIN_KEY + "\n")))
    async with Client("http://127.0.0.1:1") as client:
        assert client._http.headers["authorization"] == f"Bearer {ADMIN_KEY}"
    monkeypatch.setenv("BERTH_API_KEY", ADMIN_KEY)
    with pytest.raises(SecretSettingRefused, match="BERTH_API_KEY and BERTH_API_KEY_FILE are both set"):
        Client("http://127.0.0.1:1")


def test_the_tool_worker_serves_with_the_key_from_its_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    given: dict[str, Any] = {}

    async def serve(*agents: object, **kwargs: Any) -> None:
        given.update(kwargs)

    monkeypatch.setattr(tool_worker, "serve", serve)
    monkeypatch.setenv("BERTH_API_KEY_FILE", str(secret_file(tmp_path, "berth_0123456789ab_agentkey\n")))
    monkeypatch.setenv("BERTH_WORKER_METRICS_PORT", "0")
    assert tool_worker.run_tool_worker(BerthConfig(), ["orchestrator.demo.sample_agents:ALL"]) == 0
    assert given["api_key"] == "berth_0123456789ab_agentkey"


def test_berth_up_hands_a_child_the_value_in_place_of_the_inherited_file_variable() -> None:
    # `berth up` passes its settings as values (BerthConfig.to_env); a child that also inherited the _FILE form
    # would refuse to start with both.
    inherited = {"BERTH_JOIN_TOKEN_FILE": "/run/secrets/join-token", "BERTH_ADMIN_KEY_FILE": "/k", "PATH": "/bin"}
    env = child_environment(inherited, {"BERTH_JOIN_TOKEN": "t"})
    assert env == {"BERTH_JOIN_TOKEN": "t", "BERTH_ADMIN_KEY_FILE": "/k", "PATH": "/bin"}


def test_a_hosted_models_provider_key_is_read_from_its_file_and_a_bad_one_names_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A catalogue entry's `api_key_env` (OPENAI_API_KEY) takes the same `_FILE` form as Berth's own secrets."""
    catalogue = ModelCatalogue(BerthConfig(), None)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY_FILE", str(secret_file(tmp_path, "sk-from-a-file\n")))
    assert catalogue.route("openai/gpt-4o-mini").api_key == "sk-from-a-file"

    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment")
    with pytest.raises(UnknownModel, match="OPENAI_API_KEY and OPENAI_API_KEY_FILE are both set"):
        catalogue.route("openai/gpt-4o-mini")
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.setenv("OPENAI_API_KEY_FILE", str(tmp_path / "missing"))
    with pytest.raises(UnknownModel, match="its key cannot be read: OPENAI_API_KEY_FILE: cannot read .*missing"):
        catalogue.route("openai/gpt-4o-mini")
    monkeypatch.delenv("OPENAI_API_KEY_FILE")
    with pytest.raises(UnknownModel, match=r"needs OPENAI_API_KEY \(or OPENAI_API_KEY_FILE\) to be set"):
        catalogue.route("openai/gpt-4o-mini")
