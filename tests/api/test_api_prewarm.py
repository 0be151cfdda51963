"""Prewarming through the API, the SDK and `berth models prewarm`, over nodes registered through the app.

The route starts one PrewarmWorkflow per target on the real dev server; no worker runs them
here (the gateway's queue is this test's own), so the tests check what was started and end
those workflows afterwards.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from api_helpers import error_of
from temporalio.client import Client as TemporalClient
from temporalio.service import RPCError

from orchestrator.api import TemporalGateway
from orchestrator.cli import output
from orchestrator.cli.main import main
from orchestrator.config import BerthConfig
from orchestrator.server import create_app
from orchestrator.store import Store
from sdk import Client
from sdk.wire.node_io import PREWARM_WORKFLOW, PrewarmOnNode

JOIN_TOKEN = "join-prewarm-5c1d"
SECRET_HEADER = "X-Berth-Node-Secret"
H100_MIB = 81_559
L4_MIB = 23_034


@pytest.fixture
def config(tmp_path: Path) -> BerthConfig:
    return BerthConfig(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path}/berth.db", join_token=JOIN_TOKEN)


@pytest.fixture
async def started(temporal_client: TemporalClient) -> AsyncIterator[list[str]]:
    """The prewarm workflows a test started; ended afterwards, since no worker will run them."""
    ids: list[str] = []
    yield ids
    for workflow_id in ids:
        try:
            await temporal_client.get_workflow_handle(workflow_id).terminate("API test over")
        except RPCError:
            pass


@pytest.fixture
def gateway(temporal_client: TemporalClient, started: list[str]) -> TemporalGateway:
    """A gateway on a queue of this test's own, so no control-queue worker of another test runs its prewarms."""
    return TemporalGateway.from_client(temporal_client, task_queue=f"prewarm-{uuid.uuid4().hex[:8]}")


async def join(
    api: httpx.AsyncClient,
    node_id: str,
    dc: str = "us-east",
    gpus: tuple[int, ...] = (H100_MIB, H100_MIB),
    cached: tuple[str, ...] = (),
) -> None:
    token = (await api.post(f"/v1/nodes/{node_id}/admit")).json()["join_token"]  # admitted, not pending
    body = {
        "node_id": node_id,
        "join_token": token,
        "datacenter": dc,
        "zone": f"{dc}-1a",
        "weights_cache_capacity_bytes": 10**12,
        "gpus": [
            {"index": i, "type_name": "H100-80GB" if m == H100_MIB else "L4-24GB", "memory_total_mib": m}
            for i, m in enumerate(gpus)
        ],
    }
    joined = await api.post("/v1/nodes/register", json=body)
    assert joined.status_code == 201, joined.text
    if cached:
        beat = {"node_id": node_id, "cached_weights": [{"model": m, "size_bytes": 16 * 2**30} for m in cached]}
        sent = await api.post(
            f"/v1/nodes/{node_id}/heartbeat", json=beat, headers={SECRET_HEADER: joined.json()["node_secret"]}
        )
        assert sent.status_code < 300, sent.text


async def fleet(api: httpx.AsyncClient) -> None:
    """us-east: a has the 8B on disk, b does not, c has only one L4 (too small); eu-west: d."""
    await join(api, "a", cached=("llama-3.1-8b",))
    await join(api, "b")
    await join(api, "c", gpus=(L4_MIB,))
    await join(api, "d", dc="eu-west")


async def test_prewarm_starts_one_workflow_per_node_that_lacks_the_weights(
    api: httpx.AsyncClient, gateway: TemporalGateway, temporal_client: TemporalClient, started: list[str]
) -> None:
    await fleet(api)
    answer = await api.post("/v1/models/llama-3.1-8b/prewarm", json={})
    assert answer.status_code == 202, answer.text
    body = answer.json()
    started.extend(n["workflow_id"] for n in body["nodes"])
    assert body["model"] == "llama-3.1-8b"
    assert [(n["node_id"], n["source"]) for n in body["nodes"]] == [("b", "datacenter"), ("d", "origin")]
    for target in body["nodes"]:
        assert target["workflow_id"].startswith(f"prewarm-llama-3.1-8b-{target['node_id']}-")
        described = await temporal_client.get_workflow_handle(target["workflow_id"]).describe()
        assert described.workflow_type == PREWARM_WORKFLOW and described.task_queue == gateway.task_queue
    # What the workflow was started with: the node, the entry and the tier.
    history = await temporal_client.get_workflow_handle(body["nodes"][0]["workflow_id"]).fetch_history()
    attributes = history.events[0].workflow_execution_started_event_attributes
    order = temporal_client.data_converter.payload_converter.from_payloads(attributes.input.payloads, [PrewarmOnNode])[
        0
    ]
    assert order.node_id == "b" and order.request.tier == "datacenter" and order.request.model.name == "llama-3.1-8b"
    assert order.request.size_bytes == round(15.0 * 2**30)


async def test_prewarm_in_one_datacenter_and_without_a_body(api: httpx.AsyncClient, started: list[str]) -> None:
    await fleet(api)
    answer = await api.post("/v1/models/llama-3.1-8b/prewarm", json={"datacenter": "eu-west"})
    assert answer.status_code == 202, answer.text
    started.extend(n["workflow_id"] for n in answer.json()["nodes"])
    assert [n["node_id"] for n in answer.json()["nodes"]] == ["d"]
    bare = await api.post("/v1/models/llama-3.1-8b/prewarm")
    assert bare.status_code == 202, bare.text
    started.extend(n["workflow_id"] for n in bare.json()["nodes"])
    assert [n["node_id"] for n in bare.json()["nodes"]] == ["b", "d"]


async def test_nothing_to_prewarm_is_an_empty_answer(api: httpx.AsyncClient) -> None:
    await join(api, "a", cached=("llama-3.1-8b",))
    answer = await api.post("/v1/models/llama-3.1-8b/prewarm", json={})
    assert answer.status_code == 202 and answer.json() == {"model": "llama-3.1-8b", "nodes": []}


async def test_an_unknown_model_is_404(api: httpx.AsyncClient) -> None:
    missing = await api.post("/v1/models/no-such-model/prewarm", json={})
    assert missing.status_code == 404
    assert error_of(missing)["field"] == "name" and "no-such-model" in error_of(missing)["message"]


async def test_an_unknown_datacenter_or_a_hosted_model_is_422(api: httpx.AsyncClient) -> None:
    await fleet(api)
    bad_dc = await api.post("/v1/models/llama-3.1-8b/prewarm", json={"datacenter": "mars-1"})
    assert bad_dc.status_code == 422
    assert error_of(bad_dc)["field"] == "datacenter" and "mars-1" in error_of(bad_dc)["message"]
    hosted = await api.post("/v1/models/openai/gpt-4o/prewarm", json={})
    assert hosted.status_code == 422 and error_of(hosted)["field"] == "model"
    extra = await api.post("/v1/models/llama-3.1-8b/prewarm", json={"datacentre": "us-east"})
    assert extra.status_code == 422 and error_of(extra)["field"] == "datacentre"


async def test_the_sdk_prewarms(app, api: httpx.AsyncClient, started: list[str], admin_key: str) -> None:
    await fleet(api)
    async with Client("http://berth", api_key=admin_key, transport=httpx.ASGITransport(app)) as client:
        answer = await client.prewarm("llama-3.1-8b", datacenter="us-east")
    started.extend(n.workflow_id for n in answer.nodes)
    assert answer.model == "llama-3.1-8b" and [(n.node_id, n.source) for n in answer.nodes] == [("b", "datacenter")]


async def test_berth_models_prewarm_prints_which_node_fetches_from_where(
    app, api: httpx.AsyncClient, started: list[str], monkeypatch: pytest.MonkeyPatch, capsys, admin_key: str
) -> None:
    await fleet(api)
    monkeypatch.setenv("BERTH_API_KEY", admin_key)
    monkeypatch.setattr(output, "Client", functools.partial(Client, transport=httpx.ASGITransport(app)))
    # The CLI runs its own event loop, so it runs in a thread beside this test's.
    code = await asyncio.to_thread(main, ["models", "prewarm", "llama-3.1-8b", "--api", "http://berth"])
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NODE", "FETCHES", "FROM", "WORKFLOW"]
    rows = [line.split() for line in lines[1:] if line.strip()]
    started.extend(row[2] for row in rows)
    assert [row[:2] for row in rows] == [["b", "datacenter"], ["d", "origin"]]
    assert all(row[2].startswith(f"prewarm-llama-3.1-8b-{row[0]}-") for row in rows)
    code = await asyncio.to_thread(
        main, ["models", "prewarm", "llama-3.1-8b", "--datacenter", "mars-1", "--api", "http://berth"]
    )
    assert code == 2 and "mars-1" in capsys.readouterr().err


async def test_temporal_down_is_503_naming_the_model(
    config: BerthConfig, store: Store, api: httpx.AsyncClient, closed_port: int, admin_key: str
) -> None:
    await fleet(api)  # registered in the shared store through the working app
    down = create_app(config, store, TemporalGateway(f"127.0.0.1:{closed_port}"))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(down), base_url="http://berth", headers={"authorization": f"Bearer {admin_key}"}
    ) as client:
        answer = await client.post("/v1/models/llama-3.1-8b/prewarm", json={})
    assert answer.status_code == 503 and "llama-3.1-8b" in error_of(answer)["message"]
