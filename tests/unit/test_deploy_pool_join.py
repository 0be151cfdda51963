"""The chart's node agents join with a pool token when `node.join.poolTokenSecret` names one (issue 35): the
DaemonSet's BERTH_JOIN_TOKEN_FILE is then that Secret's, mounted as a file, and the servers keep the cluster token."""

from __future__ import annotations

from tests.unit.test_deploy_files import FULL_VALUES, pod_specs, render_chart, secret_files


def _join_token_refs(values: dict) -> dict[str, dict[str, str]]:
    node = {**FULL_VALUES["node"], **values.get("node", {})}
    pods = dict(pod_specs(render_chart({**FULL_VALUES, **values, "node": node})))
    refs = {name: secret_files(pods[name])["BERTH_JOIN_TOKEN_FILE"] for name in ("berth-server", "berth-node")}
    return {name: {"name": secret, "key": key} for name, (secret, key) in refs.items()}


def test_the_node_agents_join_with_the_pool_token_secret_when_one_is_named() -> None:
    refs = _join_token_refs({"node": {"join": {"poolTokenSecret": "berth-pool-gpu-h100"}}})
    assert refs["berth-node"] == {"name": "berth-pool-gpu-h100", "key": "join-token"}
    assert refs["berth-server"]["name"] == "berth-join-token"  # the cluster token stays the servers'


def test_without_one_the_node_agents_join_with_the_cluster_token() -> None:
    refs = _join_token_refs({})
    assert refs["berth-node"] == refs["berth-server"] and refs["berth-node"]["name"] == "berth-join-token"
