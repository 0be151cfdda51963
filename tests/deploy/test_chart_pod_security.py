"""Every pod the Helm chart makes meets Kubernetes' "restricted" Pod Security Standard, read field by field from
what Helm's own engine renders (not from the templates' text), with the values of a minimal and a production install.

The one exception is the node DaemonSet's weights cache, a hostPath volume, which even the "baseline" profile
forbids: the node's secret (its identity) and its weights must outlive the pod, so that a new pod rejoins as the same
node and loads from disk. `node.cache.hostPath: ""` keeps them in the pod instead, and then nothing is excepted.
Beside the profile: no service-account token, a dedicated account, requests and limits, probes, a NetworkPolicy over
every pod, a PodDisruptionBudget for every Deployment, and an autoscaling/v2 HPA for the API.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.chart import MINIMAL, PRODUCTION, VALUE_SETS, pod_templates, render

# The volume types the restricted profile allows.
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
HOST_PATH_EXCEPTION = ("berth-node", "weights-cache")


def effective(pod: dict[str, Any], container: dict[str, Any], field: str) -> Any:
    """A security field as Kubernetes reads it: the container's, else the pod's."""
    own = container.get("securityContext", {})
    return own[field] if field in own else pod.get("securityContext", {}).get(field)


def restricted_breaches(name: str, pod: dict[str, Any]) -> list[str]:
    """What in one pod spec the restricted profile refuses, each as `where: what`."""
    found = []
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            found.append(f"{name}: {field}")
    for volume in pod.get("volumes", []):
        kind = next(k for k in volume if k != "name")
        if kind not in RESTRICTED_VOLUMES and (name, volume["name"]) != HOST_PATH_EXCEPTION:
            found.append(f"{name}: volume {volume['name']} is {kind}")
    for container in pod.get("initContainers", []) + pod["containers"]:
        where = f"{name}/{container['name']}"
        context = container.get("securityContext", {})
        if context.get("privileged"):
            found.append(f"{where}: privileged")
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{where}: allowPrivilegeEscalation is not false")
        capabilities = context.get("capabilities", {})
        if "ALL" not in capabilities.get("drop", []):
            found.append(f"{where}: capabilities do not drop ALL")
        if set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
            found.append(f"{where}: adds {capabilities['add']}")
        if effective(pod, container, "runAsNonRoot") is not True:
            found.append(f"{where}: runAsNonRoot is not true")
        if effective(pod, container, "runAsUser") in (0, None) or effective(pod, container, "runAsGroup") == 0:
            found.append(f"{where}: runs as uid or gid 0 (or the image's user)")
        seccomp = (effective(pod, container, "seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.append(f"{where}: seccompProfile {seccomp}")
        if any(port.get("hostPort") for port in container.get("ports", [])):
            found.append(f"{where}: hostPort")
    return found


@pytest.fixture(scope="module", params=sorted(VALUE_SETS))
def objects(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return render(VALUE_SETS[request.param])


def test_every_pod_meets_the_restricted_profile(objects: list[dict[str, Any]]) -> None:
    breaches = [
        b for name, template in pod_templates(objects).items() for b in restricted_breaches(name, template["spec"])
    ]
    assert breaches == []


def test_the_hostpath_cache_is_the_one_exception_and_can_be_given_up() -> None:
    node = pod_templates(render(MINIMAL))["berth-node"]["spec"]
    assert [v["name"] for v in node["volumes"] if "hostPath" in v] == [HOST_PATH_EXCEPTION[1]]
    assert "initContainers" not in node  # nothing runs as root by default: the host directory is prepared instead
    in_pod = pod_templates(render({**MINIMAL, "node": {"cache": {"hostPath": ""}}}))["berth-node"]["spec"]
    assert not [v for v in in_pod["volumes"] if "hostPath" in v]
    assert next(v for v in in_pod["volumes"] if v["name"] == "weights-cache")["emptyDir"] == {"sizeLimit": "200Gi"}
    # Opting in to the root init container that gives the directory to uid 10001: CAP_CHOWN, and nothing else.
    fixed = pod_templates(render({**MINIMAL, "node": {"cache": {"fixPermissions": True}}}))["berth-node"]["spec"]
    (init,) = fixed["initContainers"]
    assert init["securityContext"]["runAsUser"] == 0 and init["securityContext"]["capabilities"] == {
        "drop": ["ALL"],
        "add": ["CHOWN"],
    }
    assert init["securityContext"]["allowPrivilegeEscalation"] is False and "resources" in init


def test_no_gpu_needs_privileged_mode() -> None:
    node = pod_templates(render(PRODUCTION))["berth-node"]["spec"]
    (agent,) = node["containers"]
    assert node["runtimeClassName"] == "nvidia" and agent["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert not agent["securityContext"].get("privileged") and agent["securityContext"]["capabilities"]["drop"] == [
        "ALL"
    ]


def test_root_file_systems_are_read_only_with_a_writable_tmp_and_data_dir(objects: list[dict[str, Any]]) -> None:
    for name, template in pod_templates(objects).items():
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        for container in template["spec"]["containers"]:
            assert container["securityContext"]["readOnlyRootFilesystem"] is True, name
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            assert "emptyDir" in volumes[mounts["/tmp"]], name
            assert "emptyDir" in volumes[mounts["/var/lib/berth"]], name  # the data dir and HOME


def test_no_pod_holds_a_kubernetes_token(objects: list[dict[str, Any]]) -> None:
    (account,) = [o for o in objects if o["kind"] == "ServiceAccount"]
    assert account["automountServiceAccountToken"] is False
    assert not [o for o in objects if o["kind"] in {"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"}]
    for name, template in pod_templates(objects).items():
        assert template["spec"]["automountServiceAccountToken"] is False, name
        assert template["spec"]["serviceAccountName"] == account["metadata"]["name"], name


def test_every_container_has_requests_limits_and_probes(objects: list[dict[str, Any]]) -> None:
    for name, template in pod_templates(objects).items():
        for container in template["spec"].get("initContainers", []) + template["spec"]["containers"]:
            for bound in ("requests", "limits"):
                assert {"cpu", "memory"} <= container["resources"][bound].keys(), (name, container["name"], bound)
        for container in template["spec"]["containers"]:
            assert "livenessProbe" in container and "readinessProbe" in container, (name, container["name"])


def test_every_pod_is_under_a_network_policy_and_only_the_api_is_open(objects: list[dict[str, Any]]) -> None:
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    for name, template in pod_templates(objects).items():
        labels = template["metadata"]["labels"]
        covering = [p for p in policies if p["spec"]["podSelector"]["matchLabels"].items() <= labels.items()]
        assert covering, f"{name}: no NetworkPolicy selects it"
        for policy in covering:
            assert policy["spec"]["policyTypes"] == ["Ingress"]
            for rule in policy["spec"]["ingress"]:
                open_to_anyone = not rule.get("from")
                assert not open_to_anyone or (name == "berth-server" and rule["ports"] == [{"port": "http"}]), (
                    name,
                    rule,
                )
                if any(p["port"] == "metrics" for p in rule["ports"]):
                    assert rule["from"] == [
                        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
                    ]


def test_dependencies_beside_berth_are_reached_by_berths_pods_only() -> None:
    objects = render(PRODUCTION)
    (postgres,) = [o for o in objects if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == "berth-postgres"]
    ((rule),) = postgres["spec"]["ingress"]
    assert rule["ports"] == [{"port": 5432}]
    (peer,) = rule["from"]
    berth_pods = peer["podSelector"]["matchLabels"]
    for template in pod_templates(objects).values():
        assert berth_pods.items() <= template["metadata"]["labels"].items()


def test_disruption_budgets_and_the_apis_autoscaler(objects: list[dict[str, Any]]) -> None:
    budgets = {o["metadata"]["name"]: o for o in objects if o["kind"] == "PodDisruptionBudget"}
    deployments = [o for o in objects if o["kind"] == "Deployment"]
    assert {d["metadata"]["name"] for d in deployments} == set(budgets)
    for deployment in deployments:
        budget = budgets[deployment["metadata"]["name"]]
        assert budget["apiVersion"] == "policy/v1"
        assert budget["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    (hpa,) = [o for o in objects if o["kind"] == "HorizontalPodAutoscaler"]
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "berth-server"}
    server = next(d for d in deployments if d["metadata"]["name"] == "berth-server")
    assert "replicas" not in server["spec"]  # the HPA owns the count


def test_temporals_credentials_are_mounted_read_only_in_every_pod_that_connects() -> None:
    objects = render(PRODUCTION)
    for name, template in pod_templates(objects).items():
        spec = template["spec"]
        (volume,) = [v for v in spec["volumes"] if v["name"] == "temporal-tls"]
        assert volume["secret"]["secretName"] == "berth-temporal-tls" and volume["secret"]["defaultMode"] == 0o440
        (container,) = spec["containers"]
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == "temporal-tls"]
        assert mount["readOnly"] is True
        env = {e["name"]: e for e in container["env"]}
        files = {item["path"] for item in volume["secret"]["items"]}
        for variable, file in (
            ("BERTH_TEMPORAL_TLS_CERT", "tls.crt"),
            ("BERTH_TEMPORAL_TLS_KEY", "tls.key"),
            ("BERTH_TEMPORAL_TLS_CA", "ca.crt"),
        ):
            assert env[variable]["value"] == f"{mount['mountPath']}/{file}" and file in files, (name, variable)
        assert env["BERTH_TEMPORAL_TLS_SERVER_NAME"]["value"] == "berth.a1b2c.tmprl.cloud"
        # The API key is a file of the pod's secrets volume, as every other secret is.
        (secrets,) = [v for v in spec["volumes"] if v["name"] == "secrets"]
        (secrets_mount,) = [m for m in container["volumeMounts"] if m["name"] == "secrets"]
        assert secrets_mount["readOnly"] is True
        assert env["BERTH_TEMPORAL_API_KEY_FILE"]["value"] == f"{secrets_mount['mountPath']}/temporal-api-key"
        assert {"name": "berth-temporal-key", "items": [{"key": "api-key", "path": "temporal-api-key"}]} in [
            source["secret"] for source in secrets["projected"]["sources"]
        ], name
