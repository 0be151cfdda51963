"""deploy/: the Dockerfiles, docker-compose.yml and the Helm chart say only what the code does.

Each deploy file names commands, flags, environment variables and ports that the code defines
somewhere else; a renamed flag or variable would leave them silently wrong. So every `berth …`
argv in them is parsed by the CLI's own argparse parser, every BERTH_* variable must be one the
code reads, and every port a probe, health check or scrape target uses must be the one the
process is told to listen on. The Helm chart is rendered by Helm's own template engine (Helm's Go
SDK through the `helm-python-sdk` package, as `helm template` would), then parsed as YAML.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import urlsplit

import helm_python as helm
import pytest
import yaml
from pydantic import SecretStr
from sqlalchemy.engine import make_url

from orchestrator.api.admin_key import ADMIN_KEY_ENV, install_admin_key, parse_admin_key
from orchestrator.cli.main import build_parser
from orchestrator.config import ENV_PREFIX, FILE_SUFFIX, BerthConfig
from orchestrator.store import Store
from sdk import Client

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CONTROL_PLANE_DOCKERFILE = DEPLOY / "docker" / "control-plane.Dockerfile"
NODE_DOCKERFILE = DEPLOY / "docker" / "node.Dockerfile"
COMPOSE = DEPLOY / "docker-compose.yml"
CHART = DEPLOY / "helm" / "berth"
# Inside the chart, since Helm reads no file outside it; compose's Prometheus mounts the same file.
ALERT_RULES = CHART / "files" / "berth-alerts.yml"
CODE_DIRS = ("orchestrator", "sdk", "activities", "workflows")

# Values that switch on every optional part of the chart, so that all of it is rendered and checked.
FULL_VALUES: dict[str, Any] = {
    "database": {"url": "postgresql+psycopg://berth:secret@postgres.db:5432/berth"},
    "apiKey": {"value": "berth_0123456789ab_secret"},
    "toolWorker": {"enabled": True, "agents": "orchestrator.demo.sample_agents:ALL"},
    "ingress": {"enabled": True, "className": "nginx"},
    "metrics": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}},
    "node": {"gpusPerNode": 8, "labels": {"tier": "gold"}, "extraArgs": ["--external-url", "http://127.0.0.1:9000/v1"]},
    "temporal": {
        "tls": {"existingSecret": "temporal-tls", "serverName": "frontend.temporal"},
        "apiKey": {"existingSecret": "temporal-key"},
    },
}


# --- what the code really accepts ---------------------------------------------------------------


def berth_env_vars() -> set[str]:
    """Every BERTH_* variable the code reads: BerthConfig's fields, and the names code passes to os.environ."""
    names = {ENV_PREFIX + field.upper() for field in BerthConfig.model_fields}
    for package in CODE_DIRS:
        for path in (ROOT / package).rglob("*.py"):
            # A whole string literal, as in `X_ENV = "BERTH_X"` or `os.environ.get("BERTH_X")`; the
            # mention of a variable inside a help text or docstring does not count as reading it.
            names |= set(re.findall(r"""["'](BERTH_[A-Z0-9_]+)["']""", path.read_text(encoding="utf-8")))
    return names


def read_from_a_file(variable: str) -> bool:
    """Whether Berth takes `variable`'s value from the file `<variable>_FILE` names, tried for real: a BerthConfig
    setting (what the server, worker and node agent read), or the key the SDK's Client sends (the CLI's and a tool
    worker's)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "secret"
        path.write_text("from-the-file\n")
        environ = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
        with mock.patch.dict(os.environ, {**environ, variable + FILE_SUFFIX: str(path)}, clear=True):
            config = BerthConfig.load()
            settings = [getattr(config, name) for name in BerthConfig.model_fields]
            if "from-the-file" in [s.get_secret_value() if isinstance(s, SecretStr) else s for s in settings]:
                return True
            return Client("http://127.0.0.1:1")._http.headers.get("authorization") == "Bearer from-the-file"


BERTH_VARIABLES = berth_env_vars()
# The secret settings' file forms, each found by giving it a file: BERTH_ADMIN_KEY_FILE and the like.
FILE_VARIABLES = {name + FILE_SUFFIX for name in BERTH_VARIABLES if read_from_a_file(name)}
KNOWN_ENV = BERTH_VARIABLES | FILE_VARIABLES


def strict_parser() -> argparse.ArgumentParser:
    """The CLI's own parser, refusing abbreviated flags: a deploy file spells each flag out, so that
    a new flag sharing a prefix with the abbreviation cannot change what it means."""
    parser = build_parser()
    parsers = [parser]
    while parsers:
        p = parsers.pop()
        p.allow_abbrev = False
        parsers += [c for a in p._actions if isinstance(a, argparse._SubParsersAction) for c in a.choices.values()]
    return parser


def parse_berth(argv: list[str]) -> argparse.Namespace:
    """Parse `berth …` with the CLI's parser; a refused argv fails the test with argparse's message."""
    assert argv and argv[0] == "berth", argv
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        try:
            return strict_parser().parse_args(argv[1:])
        except SystemExit:
            pytest.fail(f"`{shlex.join(argv)}` is refused by berth's CLI: {stderr.getvalue().strip()}")


def berth_argv(command: list[str] | str) -> list[str]:
    """The `berth …` argv in an exec-form command, or in a `sh -c "… berth …"` one."""
    if isinstance(command, str):
        command = shlex.split(command)
    if command[:2] == ["sh", "-c"]:
        words = shlex.split(command[2])
        words = words[words.index("exec") + 1 :] if "exec" in words else words
        return [w.replace("$(hostname)", "a-host") for w in words]
    return list(command)


def assert_known_env(names: list[str], where: str) -> None:
    unknown = sorted(n for n in names if n.startswith(ENV_PREFIX) and n not in KNOWN_ENV)
    assert not unknown, f"{where} sets {unknown}, which no Berth code reads"


# --- Dockerfiles ----------------------------------------------------------------------------------


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of each instruction, continuation lines joined, comments dropped."""
    instructions, pending = [], ""
    for line in path.read_text().splitlines():
        if line.strip().startswith("#") and not pending:
            continue
        if line.strip().startswith("#"):
            continue  # a comment inside a continued instruction
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        if pending.strip():
            keyword, _, rest = pending.strip().partition(" ")
            instructions.append((keyword.upper(), rest.strip()))
        pending = ""
    return instructions


def dockerfile_env(instructions: list[tuple[str, str]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for keyword, rest in instructions:
        if keyword == "ENV":
            env.update(word.split("=", 1) for word in shlex.split(rest))  # type: ignore[misc]
    return env


def exec_form(instructions: list[tuple[str, str]], keyword: str) -> list[str]:
    """The last KEYWORD's JSON (exec) form; Berth's Dockerfiles use no shell form, signals reach the process."""
    found = [rest for k, rest in instructions if k == keyword]
    assert found, f"no {keyword}"
    return json.loads(found[-1])


def healthcheck_command(instructions: list[tuple[str, str]]) -> list[str]:
    rest = [r for k, r in instructions if k == "HEALTHCHECK"][-1]
    return json.loads(rest[rest.index("CMD") + len("CMD") :].strip())


def final_stage(instructions: list[tuple[str, str]]) -> list[tuple[str, str]]:
    starts = [i for i, (k, _) in enumerate(instructions) if k == "FROM"]
    return instructions[starts[-1] :]


def test_control_plane_image_runs_server_by_default_and_checks_healthz_on_its_api_port() -> None:
    instructions = dockerfile_instructions(CONTROL_PLANE_DOCKERFILE)
    image = final_stage(instructions)
    assert all(rest.split()[0] == "python:3.11-slim" for k, rest in instructions if k == "FROM")
    assert any(k == "COPY" and "requirements.lock" in rest for k, rest in instructions)
    assert any(k == "RUN" and "requirements.lock" in rest and "pip install" in rest for k, rest in instructions)
    user = [rest for k, rest in image if k == "USER"][-1]
    assert user.split(":")[0] not in {"root", "0"}

    cmd = exec_form(image, "CMD")
    assert parse_berth(cmd).command == "server"
    assert parse_berth(["berth", "worker"]).command == "worker"  # the same image's other process
    env = dockerfile_env(image)
    assert_known_env(list(env), CONTROL_PLANE_DOCKERFILE.name)
    port = env["BERTH_API_PORT"]
    assert env["BERTH_HOST"] == "0.0.0.0"  # else the health check's and the world's requests meet no server
    assert [rest for k, rest in image if k == "EXPOSE"] == [port]
    check = " ".join(healthcheck_command(image))
    assert "/healthz" in check and ("BERTH_API_PORT" in check or f":{port}/" in check)


def test_node_image_is_cuda_based_with_optional_vllm_and_checks_its_metrics_port() -> None:
    instructions = dockerfile_instructions(NODE_DOCKERFILE)
    args = {rest.split("=")[0]: rest.partition("=")[2] for k, rest in instructions if k == "ARG"}
    assert args["WITH_VLLM"] == "false" and args["VLLM_VERSION"]
    assert re.fullmatch(r"nvidia/cuda:[\d.]+-runtime-ubuntu[\d.]+", args["CUDA_IMAGE"])
    image = final_stage(instructions)
    assert any(k == "RUN" and "WITH_VLLM" in rest and "vllm==${VLLM_VERSION}" in rest for k, rest in image)
    # The vllm engine starts `vllm serve`: the command must be on PATH when it is installed.
    assert any(k == "RUN" and "/usr/local/bin/vllm" in rest for k, rest in image)
    user = [rest for k, rest in image if k == "USER"][-1]
    assert user.split(":")[0] not in {"root", "0"}
    assert_known_env(list(dockerfile_env(image)), NODE_DOCKERFILE.name)
    # The agent binds its metrics port on BERTH_HOST (loopback by default): a container's must take outside probes.
    assert dockerfile_env(image)["BERTH_HOST"] == "0.0.0.0"

    node = parse_berth(berth_argv(exec_form(image, "CMD")))
    assert node.command == "node" and node.metrics_port
    assert [rest for k, rest in image if k == "EXPOSE"] == [str(node.metrics_port)]
    assert f"127.0.0.1:{node.metrics_port}/healthz" in " ".join(healthcheck_command(image))
    assert json.loads([rest for k, rest in image if k == "VOLUME"][-1]) == [node.cache_dir]


def test_dockerignore_keeps_state_out_and_lets_the_copied_sources_in() -> None:
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".git", ".venv", ".berth"} <= ignored
    for dockerfile in (CONTROL_PLANE_DOCKERFILE, NODE_DOCKERFILE):
        for keyword, rest in dockerfile_instructions(dockerfile):
            if keyword == "COPY" and not rest.startswith("--from"):
                for source in shlex.split(rest)[:-1]:
                    assert (ROOT / source).exists() and source not in ignored, (dockerfile.name, source)


# --- docker-compose.yml ---------------------------------------------------------------------------


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def url_port(text: str) -> int:
    match = re.search(r"https?://[^/:\s'\"]+:(\d+)/", text)
    assert match, text
    return int(match.group(1))


def test_compose_runs_the_whole_gpu_box() -> None:
    services = compose()["services"]
    assert {"postgres", "temporal", "server", "worker", "node", "prometheus"} <= services.keys()
    assert services["temporal"]["image"].startswith("temporalio/auto-setup:")
    assert services["temporal"]["environment"]["DB"].startswith("postgres")
    assert services["temporal"]["environment"]["POSTGRES_SEEDS"] == "postgres"
    # server and worker: one image, two commands; the node from its own image, on the NVIDIA runtime.
    assert services["worker"]["image"] == services["server"]["image"]
    for name, dockerfile in (("server", CONTROL_PLANE_DOCKERFILE), ("node", NODE_DOCKERFILE)):
        build = services[name]["build"]
        assert (COMPOSE.parent / build["context"] / build["dockerfile"]).resolve() == dockerfile
    devices = services["node"]["deploy"]["resources"]["reservations"]["devices"]
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices)


def test_compose_commands_and_env_are_berths_own() -> None:
    services = compose()["services"]
    commands = {}
    for name in ("server", "worker", "node"):
        commands[name] = parse_berth(berth_argv(services[name]["command"]))
        env = services[name]["environment"]
        assert_known_env(list(env), f"docker-compose service {name}")
        assert env["BERTH_TEMPORAL_ADDRESS"].split(":")[0] == "temporal"
        assert env["BERTH_TEMPORAL_ADDRESS"].split(":")[1] == "7233"
    assert [c.command for c in commands.values()] == ["server", "worker", "node"]
    for name in ("server", "worker"):
        url = make_url(services[name]["environment"]["BERTH_DATABASE_URL"])
        assert url.drivername == "postgresql+psycopg" and url.host == "postgres" and url.database == "berth"
        url.get_dialect()  # the driver is one SQLAlchemy knows
    assert services["postgres"]["environment"]["POSTGRES_DB"] == "berth"
    # Both ends of the join: the server checks the token the node presents.
    assert "BERTH_JOIN_TOKEN" in services["server"]["environment"]
    # The first admin key comes from the shell, required, and only the server holds it.
    assert services["server"]["environment"][ADMIN_KEY_ENV].startswith(f"${{{ADMIN_KEY_ENV}:?")
    assert [n for n in ("worker", "node") if ADMIN_KEY_ENV in services[n]["environment"]] == []
    assert "BERTH_JOIN_TOKEN" in services["node"]["environment"]
    api_url = urlsplit(services["node"]["environment"]["BERTH_API_URL"])
    assert (api_url.hostname, api_url.port) == ("server", int(services["server"]["environment"]["BERTH_API_PORT"]))


def test_compose_ports_agree_with_health_checks_and_prometheus() -> None:
    services = compose()["services"]
    api_port = int(services["server"]["environment"]["BERTH_API_PORT"])
    worker_port = int(services["worker"]["environment"]["BERTH_WORKER_METRICS_PORT"])
    node_port = parse_berth(berth_argv(services["node"]["command"])).metrics_port
    # Each binds its port (the API's, the worker's and node's metrics) on BERTH_HOST, loopback by default.
    assert [services[n]["environment"]["BERTH_HOST"] for n in ("server", "worker", "node")] == ["0.0.0.0"] * 3
    assert any(p.split(":")[-1] == str(api_port) for p in services["server"]["ports"])
    # The worker and the node answer /healthz (and the node /readyz) on their metrics port.
    for name, port, path in (
        ("server", api_port, "/healthz"),
        ("worker", worker_port, "/healthz"),
        ("node", node_port, "/readyz"),
    ):
        check = " ".join(services[name]["healthcheck"]["test"])
        assert url_port(check) == port and f":{port}{path}'" in check, name

    mounts = dict(v.split(":")[:2] for v in services["prometheus"]["volumes"])
    by_target = {target: (COMPOSE.parent / source).resolve() for source, target in mounts.items()}
    config_path = next(a.split("=", 1)[1] for a in services["prometheus"]["command"] if a.startswith("--config.file="))
    prometheus = yaml.safe_load(by_target[config_path].read_text())
    for rule_file in prometheus["rule_files"]:
        assert by_target[rule_file] == ALERT_RULES  # the chart's copy, the one there is
        assert by_target[rule_file].exists()
    targets = {t for job in prometheus["scrape_configs"] for c in job["static_configs"] for t in c["targets"]}
    assert targets == {f"server:{api_port}", f"worker:{worker_port}", f"node:{node_port}"}
    assert all(job.get("metrics_path", "/metrics") == "/metrics" for job in prometheus["scrape_configs"])
    # The API's /metrics names every tenant: Prometheus reads it with the key of a compose secret.
    (server_job,) = [
        j for j in prometheus["scrape_configs"] if f"server:{api_port}" in j["static_configs"][0]["targets"]
    ]
    secret_file = server_job["authorization"]["credentials_file"]
    assert secret_file.startswith("/run/secrets/")
    secret = secret_file.removeprefix("/run/secrets/")
    assert secret in services["prometheus"]["secrets"]
    assert compose()["secrets"][secret] == {"environment": ADMIN_KEY_ENV}


# --- the Helm chart ---------------------------------------------------------------------------------


def render_chart(values: dict[str, Any]) -> list[dict[str, Any]]:
    """`helm template berth deploy/helm/berth -n berth -f values`, parsed: every Kubernetes object."""
    with helm.Chart.load(CHART) as chart:
        rendered = chart.render(values, name="berth", namespace="berth")
    return [
        doc
        for path, text in sorted(rendered.items())
        if not path.endswith("NOTES.txt")
        for doc in yaml.safe_load_all(text)
        if doc
    ]


@pytest.fixture(scope="module")
def objects() -> list[dict[str, Any]]:
    return render_chart(FULL_VALUES)


def one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name, [o["metadata"]["name"] for o in objects])
    return found[0]


def pod_specs(objects: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for o in objects:
        if o["kind"] in {"Deployment", "DaemonSet", "StatefulSet", "Job"}:
            yield o["metadata"]["name"], o["spec"]["template"]["spec"]


def containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return pod.get("initContainers", []) + pod["containers"]


def env_value(container: dict[str, Any], name: str) -> Any:
    return next(e for e in container["env"] if e["name"] == name).get("value")


def test_chart_lints_clean_and_renders_every_part() -> None:
    report = helm.lint(CHART, FULL_VALUES, strict=True)
    assert not report["errors"] and all(m["severity"] < 2 for m in report["messages"]), report
    objects = render_chart(FULL_VALUES)
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert {
        ("Deployment", "berth-server"),
        ("Service", "berth-server"),
        ("Deployment", "berth-worker"),
        ("DaemonSet", "berth-node"),
        ("Deployment", "berth-tool-worker"),
        ("Ingress", "berth"),
        ("ServiceMonitor", "berth"),
        ("PrometheusRule", "berth"),
        ("Secret", "berth-join-token"),
        ("Secret", "berth-database"),
        ("Secret", "berth-api-key"),
    } <= kinds
    defaults = {o["kind"] for o in render_chart({"database": FULL_VALUES["database"]})}
    assert not {"ServiceMonitor", "PrometheusRule", "Ingress"} & defaults  # optional, off by default


def test_chart_refuses_to_render_without_a_database() -> None:
    with pytest.raises(helm.HelmError, match="database.url"):
        render_chart({})


def test_every_container_command_and_berth_variable_is_real(objects: list[dict[str, Any]]) -> None:
    commands = {}
    for name, pod in pod_specs(objects):
        for container in containers(pod):
            argv = container.get("args") or container.get("command")
            if argv and argv[0] == "berth":
                commands[name] = parse_berth(argv)
            assert_known_env([e["name"] for e in container.get("env", [])], f"{name}/{container['name']}")
    assert {n: c.command for n, c in commands.items()} == {
        "berth-server": "server",
        "berth-worker": "worker",
        "berth-tool-worker": "worker",
        "berth-node": "node",
    }
    assert commands["berth-tool-worker"].agents == FULL_VALUES["toolWorker"]["agents"]


def test_server_probes_hit_healthz_and_readyz_on_the_port_it_listens_on(objects: list[dict[str, Any]]) -> None:
    deployment = one(objects, "Deployment", "berth-server")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert env_value(container, "BERTH_HOST") == "0.0.0.0"
    listens = int(env_value(container, "BERTH_API_PORT"))
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}

    def probe_port(probe: dict[str, Any]) -> int:
        port = probe["httpGet"]["port"]
        return ports[port] if isinstance(port, str) else port

    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert probe_port(container[probe]) == listens, probe
    service = one(objects, "Service", "berth-server")
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["http"]


def test_worker_and_node_metrics_ports_are_the_ones_they_serve(objects: list[dict[str, Any]]) -> None:
    (worker,) = one(objects, "Deployment", "berth-worker")["spec"]["template"]["spec"]["containers"]
    served = int(env_value(worker, "BERTH_WORKER_METRICS_PORT"))
    assert {p["name"]: p["containerPort"] for p in worker["ports"]} == {"metrics": served}
    for probe in ("startupProbe", "livenessProbe"):
        assert worker[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}, probe
    (node,) = one(objects, "DaemonSet", "berth-node")["spec"]["template"]["spec"]["containers"]
    node_args = parse_berth(node["args"])
    assert {p["name"]: p["containerPort"] for p in node["ports"]} == {"metrics": node_args.metrics_port}
    assert node["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert node["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    # A node that is not ready is still scraped: its metrics are what tells why.
    assert one(objects, "Service", "berth-node-metrics")["spec"]["publishNotReadyAddresses"] is True
    # The ServiceMonitor's ports are the Services' port names, and each Service leads to them.
    monitor = one(objects, "ServiceMonitor", "berth")
    scraped = {e["port"] for e in monitor["spec"]["endpoints"]}
    labelled = [
        o
        for o in objects
        if o["kind"] == "Service"
        and monitor["spec"]["selector"]["matchLabels"].items() <= o["metadata"]["labels"].items()
    ]
    assert {o["metadata"]["name"] for o in labelled} == {"berth-server", "berth-worker-metrics", "berth-node-metrics"}
    for service in labelled:
        assert {p["name"] for p in service["spec"]["ports"]} <= scraped
    # Both bind their metrics port on BERTH_HOST, loopback by default: the kubelet and Prometheus come from outside.
    assert env_value(worker, "BERTH_HOST") == env_value(node, "BERTH_HOST") == "0.0.0.0"


def test_the_service_monitor_reads_the_apis_metrics_with_a_key_from_a_secret(objects: list[dict[str, Any]]) -> None:
    endpoints = {e["port"]: e for e in one(objects, "ServiceMonitor", "berth")["spec"]["endpoints"]}
    # The API's /metrics names every tenant, so it needs a key; the worker's and nodes' ports have no keys.
    assert "authorization" not in endpoints["metrics"]
    credentials = endpoints["http"]["authorization"]
    assert credentials["type"] == "Bearer"
    admin_key = one(objects, "Secret", credentials["credentials"]["name"])  # by default, the admin key's
    assert credentials["credentials"]["key"] in admin_key["data"]
    own = {"metrics": {"serviceMonitor": {"enabled": True, "apiKeySecret": "prometheus-key", "apiKeySecretKey": "key"}}}
    monitor = one(render_chart({**FULL_VALUES, **own}), "ServiceMonitor", "berth")
    (http,) = [e for e in monitor["spec"]["endpoints"] if e["port"] == "http"]
    assert http["authorization"]["credentials"] == {"name": "prometheus-key", "key": "key"}


def test_the_prometheus_rule_is_the_alert_rules_file(objects: list[dict[str, Any]]) -> None:
    rule = one(objects, "PrometheusRule", "berth")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["spec"]["groups"] == yaml.safe_load(ALERT_RULES.read_text())["groups"]
    # The labels a Prometheus's ruleSelector picks it by.
    values = {**FULL_VALUES, "metrics": {"prometheusRule": {"enabled": True, "labels": {"release": "kps"}}}}
    labelled = one(render_chart(values), "PrometheusRule", "berth")
    assert labelled["metadata"]["labels"]["release"] == "kps"
    assert labelled["metadata"]["labels"]["app.kubernetes.io/instance"] == "berth"


def test_node_daemonset_runs_on_gpu_nodes_with_a_host_weights_cache(objects: list[dict[str, Any]]) -> None:
    pod = one(objects, "DaemonSet", "berth-node")["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert any(t["key"] == "nvidia.com/gpu" for t in pod["tolerations"])
    (container,) = pod["containers"]
    args = parse_berth(container["args"])
    assert args.node_id == "$(NODE_NAME)"  # expanded by Kubernetes from the env below
    assert next(e for e in container["env"] if e["name"] == "NODE_NAME")["valueFrom"]["fieldRef"] == {
        "fieldPath": "spec.nodeName"
    }
    assert args.label == ["tier=gold"] and args.external_url == "http://127.0.0.1:9000/v1"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    cache = next(name for name, path in mounts.items() if path == args.cache_dir)
    assert volumes[cache]["hostPath"]["path"] and volumes[cache]["hostPath"]["type"] == "DirectoryOrCreate"
    api = urlsplit(env_value(container, "BERTH_API_URL"))
    server = one(objects, "Service", "berth-server")
    assert (api.hostname, api.port) == (server["metadata"]["name"], server["spec"]["ports"][0]["port"])


def secret_files(pod: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Each BERTH_*_FILE variable of the pod's containers, and the (Secret, key) its file is: the file lies in a
    read-only mount of a projected volume whose source puts that key of that Secret there."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    found: dict[str, tuple[str, str]] = {}
    for container in pod["containers"]:
        mounts = {m["mountPath"]: m for m in container.get("volumeMounts", [])}
        for e in container.get("env", []):
            if not e["name"].endswith(FILE_SUFFIX):
                continue
            directory, _, file = e["value"].rpartition("/")
            mount = mounts[directory]
            assert mount["readOnly"] is True, (container["name"], mount)
            sources = volumes[mount["name"]]["projected"]["sources"]
            (found[e["name"]],) = [
                (source["secret"]["name"], item["key"])
                for source in sources
                for item in source["secret"]["items"]
                if item["path"] == file
            ]
    return found


def test_no_secret_reaches_a_process_as_a_variable(objects: list[dict[str, Any]]) -> None:
    # checkov's CKV_K8S_35: a value in the environment is in `kubectl describe`, in every child and in crash dumps.
    for name, pod in pod_specs(objects):
        for container in containers(pod):
            assert "envFrom" not in container, name
            for e in container.get("env", []):
                assert "secretKeyRef" not in e.get("valueFrom", {}), (name, e["name"])


def test_every_secret_file_variable_of_the_chart_is_one_the_code_reads(objects: list[dict[str, Any]]) -> None:
    used = {variable for _, pod in pod_specs(objects) for variable in secret_files(pod)}
    assert used == {
        "BERTH_DATABASE_URL_FILE",
        "BERTH_ADMIN_KEY_FILE",
        "BERTH_JOIN_TOKEN_FILE",
        "BERTH_TEMPORAL_API_KEY_FILE",
        "BERTH_API_KEY_FILE",
    }
    assert used <= FILE_VARIABLES, used - FILE_VARIABLES


def test_the_secret_files_are_readable_by_the_pods_user_and_by_no_one_else(objects: list[dict[str, Any]]) -> None:
    # A Secret's files belong to root and the pod's fsGroup: 0440 lets the group (the processes' 10001) read them.
    for name, pod in pod_specs(objects):
        (secrets,) = [v for v in pod["volumes"] if v["name"] == "secrets"]
        assert secrets["projected"]["defaultMode"] == 0o440, name
        assert all("mode" not in i for s in secrets["projected"]["sources"] for i in s["secret"]["items"]), name
        group = pod["securityContext"]["fsGroup"]
        for container in pod["containers"]:
            assert container["securityContext"]["runAsGroup"] == group == 10001, name


def test_secrets_are_referenced_by_the_pods_that_need_them(objects: list[dict[str, Any]]) -> None:
    secrets = {
        o["metadata"]["name"]: {**o.get("data", {}), **o.get("stringData", {})}
        for o in objects
        if o["kind"] == "Secret"
    }
    refs: dict[str, set[tuple[str, str]]] = {}
    for name, pod in pod_specs(objects):
        for variable, (secret, key) in secret_files(pod).items():
            if secret == FULL_VALUES["temporal"]["apiKey"]["existingSecret"]:
                continue  # the operator's own Secret: the chart makes none for Temporal's key
            assert key in secrets[secret], (name, variable, secret, key)
            refs.setdefault(name, set()).add((variable.removesuffix(FILE_SUFFIX), secret))
    assert ("BERTH_JOIN_TOKEN", "berth-join-token") in refs["berth-server"]
    assert ("BERTH_JOIN_TOKEN", "berth-join-token") in refs["berth-node"]
    assert [name for name, pod_refs in refs.items() if (ADMIN_KEY_ENV, "berth-admin-key") in pod_refs] == [
        "berth-server"
    ]
    # Generated at install (no adminKey.value here), in the format `berth server` accepts.
    parse_admin_key(base64.b64decode(secrets["berth-admin-key"]["admin-key"]).decode())
    for name in ("berth-server", "berth-worker"):
        assert ("BERTH_DATABASE_URL", "berth-database") in refs[name]
    assert ("BERTH_API_KEY", "berth-api-key") in refs["berth-tool-worker"]
    assert secrets["berth-api-key"]["api-key"] == FULL_VALUES["apiKey"]["value"]
    assert make_url(secrets["berth-database"]["url"]).drivername == "postgresql+psycopg"
    # Every secret is someone's; none is made and left unused.
    assert set(secrets) == {secret for pod_refs in refs.values() for _, secret in pod_refs}
    # Temporal's API key reaches every process that connects to Temporal.
    assert all("BERTH_TEMPORAL_API_KEY_FILE" in secret_files(pod) for _, pod in pod_specs(objects))


def test_existing_secrets_replace_the_charts_own() -> None:
    objects = render_chart(
        {
            "database": {"existingSecret": "pg"},
            "joinToken": {"existingSecret": "jt"},
            "adminKey": {"existingSecret": "admin", "existingSecretKey": "k"},
            "apiKey": {"existingSecret": "ak", "existingSecretKey": "key"},
            "toolWorker": {"enabled": True, "agents": "m:a"},
            "node": {"join": {"poolTokenSecret": "pool", "poolTokenSecretKey": "token"}},
        }
    )
    assert not [o for o in objects if o["kind"] == "Secret"]
    pods = dict(pod_specs(objects))
    assert secret_files(pods["berth-tool-worker"]) == {"BERTH_API_KEY_FILE": ("ak", "key")}
    assert secret_files(pods["berth-server"]) == {
        "BERTH_DATABASE_URL_FILE": ("pg", "url"),
        "BERTH_JOIN_TOKEN_FILE": ("jt", "join-token"),
        "BERTH_ADMIN_KEY_FILE": ("admin", "k"),
    }
    assert secret_files(pods["berth-worker"]) == {"BERTH_DATABASE_URL_FILE": ("pg", "url")}
    # A pool token: each node is admitted as it joins, and the cluster token is not the node's to hold.
    assert secret_files(pods["berth-node"]) == {"BERTH_JOIN_TOKEN_FILE": ("pool", "token")}


def test_an_admin_key_given_to_the_chart_is_checked_and_kept_as_given() -> None:
    key = "berth_0123456789ab_" + "s" * 43
    secret = one(
        render_chart({"database": FULL_VALUES["database"], "adminKey": {"value": key}}), "Secret", "berth-admin-key"
    )
    assert base64.b64decode(secret["data"]["admin-key"]).decode() == key
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    # What `berth server` would refuse to start on is refused at install instead.
    for malformed in ("berth_0123456789ab_short", "berth_0123456789AB_" + "s" * 43, "s" * 60):
        with pytest.raises(helm.HelmError, match="adminKey.value must read"):
            render_chart({"database": FULL_VALUES["database"], "adminKey": {"value": malformed}})


# --- `berth …` mentioned anywhere under deploy/ ----------------------------------------------------


def subcommand_parser(words: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The (sub)parser that `berth words…` reaches, and the words it leaves for that parser."""
    parser = build_parser()
    while words:
        subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subparsers or words[0].startswith("-"):
            break
        assert words[0] in subparsers[0].choices, f"`berth {words[0]}` is not a berth command"
        parser, words = subparsers[0].choices[words[0]], words[1:]
    return parser, words


def test_every_berth_command_named_in_deploy_docs_exists_with_those_flags() -> None:
    # Prose mentions a command with some of its flags (`berth node --metrics-port`), so these are
    # checked for the command and each flag's existence rather than parsed as whole argvs.
    mentions = []
    for path in [
        *DEPLOY.rglob("*.md"),
        *DEPLOY.rglob("*.Dockerfile"),
        *DEPLOY.rglob("*.yml"),
        *(CHART / "templates").glob("*"),
    ]:
        text = path.read_text()
        # In `inline code`, and as lines of fenced code blocks (after a shell prompt, if any).
        snippets = re.findall(r"`(berth [^`]+)`", text) + re.findall(r"^\s*(?:\$ )?(berth [^\n]+)$", text, re.M)
        mentions += [(path.relative_to(ROOT), snippet) for snippet in snippets]
    assert len(mentions) >= 5
    for path, snippet in mentions:
        words = shlex.split(snippet.replace("…", ""), comments=True)[1:]
        parser, rest = subcommand_parser(words)
        for flag in (w.split("=")[0] for w in rest if w.startswith("--")):
            assert flag in parser._option_string_actions, f"{path}: `{snippet}`: {flag} is not a flag of it"


def test_the_documented_way_to_make_an_admin_key_makes_one_berth_server_accepts(tmp_path: Path) -> None:
    # deploy/README.md, docker-compose.yml and the error `berth server` stops with tell the operator to make
    # BERTH_ADMIN_KEY with this one-liner; each must make a key the server stores and then authenticates.
    texts = [(DEPLOY / "README.md").read_text(), COMPOSE.read_text(), parse_admin_key_error()]
    snippets = {snippet for text in texts for snippet in re.findall(r"python3 -c '([^']*token_hex[^']*)'", text)}
    assert len(snippets) == 1 and all("token_hex" in t for t in texts), snippets
    (code,) = snippets
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    key = done.stdout.strip()
    store = Store.open(f"sqlite:///{tmp_path / 'b.db'}")
    try:
        assert install_admin_key(store, SecretStr(key)) is True
        assert store.keys.authenticate(key).role.value == "admin"
    finally:
        store.close()


def parse_admin_key_error() -> str:
    with pytest.raises(Exception) as refused:
        parse_admin_key("not-a-key")
    return str(refused.value)


def test_every_berth_variable_named_under_deploy_is_read_by_the_code() -> None:
    # Comments and prose too: compose's commented Temporal credentials, the READMEs' tables.
    for path in DEPLOY.rglob("*"):
        if path.is_file():
            named = re.findall(r"\bBERTH_[A-Z0-9_]*[A-Z0-9]\b", path.read_text(errors="ignore"))
            assert_known_env(named, str(path.relative_to(ROOT)))


def test_every_process_that_connects_to_temporal_gets_its_credentials(objects: list[dict[str, Any]]) -> None:
    # The chart's Temporal credentials reach each pod that connects: server, worker, tool worker and node alike.
    for name, pod in pod_specs(objects):
        (container,) = pod["containers"]
        env = {e["name"] for e in container["env"]}
        assert {
            "BERTH_TEMPORAL_ADDRESS",
            "BERTH_TEMPORAL_TLS_CERT",
            "BERTH_TEMPORAL_TLS_KEY",
            "BERTH_TEMPORAL_TLS_CA",
            "BERTH_TEMPORAL_TLS_SERVER_NAME",
            "BERTH_TEMPORAL_API_KEY_FILE",
        } <= env, name
    services = compose()["services"]
    # compose's own Temporal is on its private network; its credentials are there, commented, for one of your own.
    assert "# BERTH_TEMPORAL_TLS_CERT:" in COMPOSE.read_text() and "temporal-tls:ro" in COMPOSE.read_text()
    assert all("BERTH_TEMPORAL_ADDRESS" in services[n]["environment"] for n in ("server", "worker", "node"))


def test_no_deploy_doc_still_makes_the_admin_key_by_hand() -> None:
    # The exec-into-a-pod workaround is gone: BERTH_ADMIN_KEY replaces it.
    for path in DEPLOY.rglob("*"):
        if path.is_file():
            assert "ensure_admin_key" not in path.read_text(errors="ignore"), path
