"""The Helm chart rendered by Helm's own engine (Helm's Go SDK through `helm-python-sdk`, as `helm template` would),
for the tests that judge what Kubernetes would be given."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "berth"
DIGEST = "sha256:" + "0" * 64

# What a production install gives: images by digest, Temporal's client certificate and API key from Secrets, and
# every optional part switched on, so all of the chart is rendered.
PRODUCTION: dict[str, Any] = {
    "image": {"controlPlane": {"digest": DIGEST}, "node": {"digest": DIGEST}},
    "database": {"existingSecret": "berth-pg"},
    "temporal": {
        "address": "berth.a1b2c.tmprl.cloud:7233",
        "tls": {"existingSecret": "berth-temporal-tls", "serverName": "berth.a1b2c.tmprl.cloud"},
        "apiKey": {"existingSecret": "berth-temporal-key"},
    },
    "apiKey": {"existingSecret": "berth-tools"},
    "toolWorker": {"enabled": True, "agents": "orchestrator.demo.sample_agents:ALL"},
    "ingress": {"enabled": True, "className": "nginx"},
    "metrics": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}},
    "node": {"gpusPerNode": 8, "labels": {"tier": "gold"}},
    "networkPolicy": {
        "nodePeersPort": 9401,
        "dependencies": [
            {
                "name": "postgres",
                "podSelector": {"matchLabels": {"app.kubernetes.io/name": "postgresql"}},
                "ports": [5432],
            }
        ],
    },
}

# The least an install needs.
MINIMAL: dict[str, Any] = {"database": {"url": "postgresql+psycopg://berth:secret@postgres.db:5432/berth"}}

VALUE_SETS: dict[str, dict[str, Any]] = {
    "minimal": MINIMAL,
    "minimal-by-digest": {**MINIMAL, "image": PRODUCTION["image"]},
    "production": PRODUCTION,
}


def render_files(values: dict[str, Any]) -> dict[str, str]:
    """Each template's rendered text, by path, NOTES.txt left out."""
    with helm.Chart.load(CHART) as chart:
        rendered = chart.render(values, name="berth", namespace="berth")
    return {path: text for path, text in sorted(rendered.items()) if not path.endswith("NOTES.txt")}


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    """Every Kubernetes object `helm template berth deploy/helm/berth -n berth` makes with these values."""
    return [doc for text in render_files(values).values() for doc in yaml.safe_load_all(text) if doc]


def pod_templates(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The pod template of each workload, by the workload's name."""
    kinds = {"Deployment", "DaemonSet", "StatefulSet", "Job"}
    return {o["metadata"]["name"]: o["spec"]["template"] for o in objects if o["kind"] in kinds}
