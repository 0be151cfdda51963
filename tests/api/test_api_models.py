"""The model catalogue through the API: seeded, editable, validated, and used by submit."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from api_helpers import error_of, unique

from orchestrator.store import Store
from sdk.wire.catalogue import KeepAliveView, ModelForesight, PrewarmView


async def test_the_catalogue_is_seeded_with_realistic_models(api) -> None:
    models = {m["entry"]["name"]: m for m in (await api.get("/v1/models")).json()}
    assert {"llama-3.2-1b", "llama-3.1-8b", "llama-3.1-70b"} <= set(models)
    seventy = models["llama-3.1-70b"]["entry"]
    assert seventy["weights_gib"] > 120 and 1 not in seventy["tensor_parallel"]
    assert models["llama-3.1-8b"]["policy"]["min_replicas"] == 0  # scale to zero by default
    hosted = (await api.get("/v1/models/openai/gpt-4o-mini")).json()["entry"]
    assert hosted["provider"] == "hosted" and hosted["api_key_env"] == "OPENAI_API_KEY"


async def test_a_model_can_be_added_edited_and_used(api) -> None:
    name = unique("mistral-7b")
    entry = {
        "name": name,
        "weights_gib": 13.5,
        "kv_headroom_gib": 6,
        "tensor_parallel": [1, 2],
        "usd_per_1m_prompt": 0.2,
        "usd_per_1m_completion": 0.25,
    }
    created = await api.put(f"/v1/models/{name}", json=entry)
    assert created.status_code == 201
    edited = await api.put(f"/v1/models/{name}", json={**entry, "usd_per_1m_prompt": 0.1})
    assert edited.status_code == 200 and edited.json()["entry"]["usd_per_1m_prompt"] == 0.1
    agent = {"name": unique("uses-new-model"), "model": name}
    assert (await api.post("/v1/agents", json=agent)).status_code == 201


async def test_scaling_policies_are_validated(api) -> None:
    ok = await api.put(
        "/v1/models/llama-3.1-8b/policy",
        json={
            "min_replicas": 1,
            "max_replicas": 3,
            "idle_timeout_s": 120,
            "scaler": "request_count",
            "target": 8,
            "warm_buffer": 1,
        },
    )
    assert ok.status_code == 200 and ok.json()["policy"]["max_replicas"] == 3
    assert (await api.get("/v1/models/llama-3.1-8b/policy")).json()["min_replicas"] == 1
    # null (or leaving it out) goes back to the window learned from the model's own idle gaps
    learned = await api.put(
        "/v1/models/llama-3.1-8b/policy", json={"idle_timeout_s": None, "intent_gpu_hours_per_hour": 0}
    )
    assert learned.status_code == 200, learned.text
    assert {k: learned.json()["policy"][k] for k in ("idle_timeout_s", "intent_gpu_hours_per_hour")} == {
        "idle_timeout_s": None,
        "intent_gpu_hours_per_hour": 0,
    }


async def test_a_new_policy_learns_its_idle_window_and_models_carry_what_the_scaler_learned(api, store: Store) -> None:
    name = unique("phi-3")
    await api.put(f"/v1/models/{name}", json={"name": name, "weights_gib": 7.5})
    created = (await api.get(f"/v1/models/{name}")).json()
    assert created["policy"]["idle_timeout_s"] is None and created["policy"]["intent_gpu_hours_per_hour"] == 2.0
    assert created["foresight"] is None  # the scaler has not planned for it yet
    at = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
    store.models.publish_foresight(
        {
            name: ModelForesight(
                keep_alive=[KeepAliveView(level=1, window_s=720, prewarm_s=0, source="learned", gaps=254)],
                prewarms=[PrewarmView(replica_id="r-1", started_at=at, reason="2 announced steps", used_at=at)],
                announced=2,
                intent_gpu_hours_last_hour=0.25,
                updated_at=at,
            )
        }
    )
    listed = {m["entry"]["name"]: m for m in (await api.get("/v1/models")).json()}
    for model in (listed[name], (await api.get(f"/v1/models/{name}")).json()):
        foresight = model["foresight"]
        assert foresight["keep_alive"] == [
            {"level": 1, "window_s": 720, "prewarm_s": 0, "source": "learned", "gaps": 254}
        ]
        assert foresight["prewarms"][0]["replica_id"] == "r-1" and foresight["prewarms"][0]["used_at"] is not None
        assert (foresight["announced"], foresight["intent_gpu_hours_last_hour"]) == (2, 0.25)


@pytest.mark.parametrize(
    "policy, field",
    [
        ({"min_replicas": 3, "max_replicas": 2}, None),
        ({"idle_timeout_s": -1}, "idle_timeout_s"),
        ({"idle_timeout_s": 0}, "idle_timeout_s"),
        ({"intent_gpu_hours_per_hour": -1}, "intent_gpu_hours_per_hour"),
        ({"scaler": "vibes"}, "scaler"),
        ({"max_replicas": 0}, "max_replicas"),
    ],
)
async def test_bad_policies_are_refused_and_change_nothing(api, policy: dict, field: str | None) -> None:
    before = (await api.get("/v1/models/llama-3.2-1b/policy")).json()
    refused = await api.put("/v1/models/llama-3.2-1b/policy", json=policy)
    assert refused.status_code == 422
    error = error_of(refused)
    if field:
        assert error["field"] == field
    else:
        assert "above max_replicas" in error["message"]
    assert (await api.get("/v1/models/llama-3.2-1b/policy")).json() == before


@pytest.mark.parametrize(
    "entry, field",
    [
        ({"weights_gib": 0}, None),
        ({"weights_gib": 10, "tensor_parallel": [3]}, "tensor_parallel"),
        ({"weights_gib": 10, "usd_per_1m_prompt": -1}, "usd_per_1m_prompt"),
        ({"provider": "hosted"}, None),
        ({"weights_gib": 400, "kv_headroom_gib": 20, "tensor_parallel": [1, 2]}, "tensor_parallel"),  # no GPU holds it
    ],
)
async def test_bad_models_are_refused(api, entry: dict, field: str | None) -> None:
    name = unique("bad-model")
    refused = await api.put(f"/v1/models/{name}", json={"name": name, **entry})
    assert refused.status_code == 422
    if field:
        assert error_of(refused)["field"] == field
    assert (await api.get(f"/v1/models/{name}")).status_code == 404


@pytest.mark.parametrize(
    "path, body, field",
    [
        ("/v1/models/llama-3.2-1b/policy", '{"target": Infinity}', "target"),
        ("/v1/models/llama-3.2-1b/policy", '{"target": NaN}', "target"),
        (
            "/v1/models/llama-3.2-1b",
            '{"name": "llama-3.2-1b", "weights_gib": 2.5, "usd_per_1m_prompt": Infinity}',
            "usd_per_1m_prompt",
        ),
        (
            "/v1/models/llama-3.2-1b",
            '{"name": "llama-3.2-1b", "weights_gib": 2.5, "engine_args": {"x": NaN}}',
            "engine_args.x",
        ),
    ],
    ids=["infinite-target", "nan-target", "infinite-price", "nan-engine-arg"],
)
async def test_non_finite_numbers_are_refused_and_the_model_stays_readable(
    api, path: str, body: str, field: str
) -> None:
    """Python's JSON parser reads NaN and Infinity; once stored they made the model unreadable (a 500 on
    every later read of it, and of the whole catalogue)."""
    before = (await api.get("/v1/models/llama-3.2-1b")).json()
    refused = await api.put(path, content=body, headers={"content-type": "application/json"})
    # (A union's member is named after the field: engine_args.x.str.)
    assert refused.status_code == 422 and error_of(refused)["field"].startswith(field), refused.text
    assert (await api.get("/v1/models/llama-3.2-1b")).json() == before
    assert (await api.get("/v1/models")).status_code == 200


async def test_path_and_body_must_name_the_same_model(api) -> None:
    refused = await api.put("/v1/models/one-name", json={"name": "other-name", "weights_gib": 1})
    assert refused.status_code == 422 and error_of(refused)["field"] == "name"


async def test_a_model_no_gpu_type_could_hold_is_refused_with_the_degree_that_would_fit(api) -> None:
    name = unique("huge")
    refused = await api.put(
        f"/v1/models/{name}", json={"name": name, "weights_gib": 400, "kv_headroom_gib": 20, "tensor_parallel": [1, 2]}
    )
    assert refused.status_code == 422
    assert error_of(refused)["message"].endswith("has 141 GiB; allow tensor_parallel 4")
