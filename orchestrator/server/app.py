"""The control-plane HTTP app: routes under /v1 behind API keys, the admin UI at /, MCP at /mcp, health probes,
one error shape. It composes the API, the UI and the MCP server, each of which knows nothing of the others
beyond what it imports below it (the UI calls the API's services; the API imports neither).

Every user router is included here with `authenticate` as a router dependency, so a route
added to one of them needs a key without having to remember it; the node agents' routers
(join, heartbeat, step books) authenticate with the join token and node secrets instead.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI

from activities.step.tokens import warm_up_counting

from .. import ui
from ..api import (
    agents,
    audit,
    checkpoints,
    errors,
    events,
    health,
    keys,
    loop_approvals,
    loop_trace,
    metrics,
    models,
    node_pools,
    nodes,
    own_loop,
    own_loop_responses,
    peers,
    steps,
    tasks,
    tenants,
)
from ..api.admin_key import install_admin_key
from ..api.audit import AuditTrail
from ..api.auth import authenticate
from ..api.limits import BodySizeLimit, KeyRateLimit
from ..api.listening import listen_for_heartbeats
from ..api.services import Services
from ..api.temporal_gateway import TemporalGateway, TemporalUnavailable
from ..catalogue import ModelCatalogue
from ..config import BerthConfig
from ..mcp_server.http import mount as mount_mcp
from ..reconcile import Reconciler
from ..store import Store
from ..telemetry import install_metrics
from ..telemetry.fleet_gauges import fleet_reading, watch_fleet
from ..telemetry.task_gauges import task_reading, watch_tasks
from ..temporal import temporal_connect_options
from ..tokenizers import tokenizers_under

log = logging.getLogger("berth.server")
# Tasks each scrape reads for the alert gauges (waiting for a GPU; running, for their budget): a
# scrape stays a few milliseconds however large the backlog, and beyond this many the counts are "at least".
ALERT_SCAN = 2000


def create_app(config: BerthConfig, store: Store, temporal: TemporalGateway) -> FastAPI:
    """The app over an open store and a (possibly not yet connected) Temporal gateway. With `config.admin_key`
    (BERTH_ADMIN_KEY), that admin key is made sure of first: AdminKeyRefused when it cannot be."""
    if config.admin_key is not None:
        install_admin_key(store, config.admin_key)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        # Connect early so the first request does not pay for it, but start regardless:
        # /readyz reports Temporal down until it answers, and every call retries.
        try:
            await temporal.client()
        except TemporalUnavailable as exc:
            log.warning("starting without Temporal: %s", exc)
        if config.fleet:
            # The step routes count GPU nodes' prompts: load the tokenizers now (gpt-4o's, and each real-weights
            # model's own, in threads), not inside the first step.
            asyncio.get_running_loop().run_in_executor(None, warm_up_counting)
            warming = asyncio.create_task(_warm_model_tokenizers(config, catalogue), name="tokenizer-warm-up")
        sampling = asyncio.create_task(fleet_history.run(), name="ui-fleet-history")
        listening = asyncio.create_task(listen_for_heartbeats(store), name="heartbeat-listener")
        reconciling = asyncio.create_task(reconciler.run(), name="task-reconciler")
        try:
            async with mcp.running():
                yield
        finally:
            sampling.cancel()
            listening.cancel()
            reconciling.cancel()
            if config.fleet:
                warming.cancel()

    app = FastAPI(
        title="Berth",
        version="0.1.0",
        description="Durable AI-agent tasks with hard token budgets and checkpoints.",
        lifespan=lifespan,
    )
    catalogue = ModelCatalogue(config, store.models)
    app.state.services = Services(
        config=config,
        store=store,
        temporal=temporal,
        catalogue=catalogue,
        submissions=KeyRateLimit(config.submit_rate_per_s, config.submit_burst),
    )
    errors.install(app)
    # The last added runs first: the audit trail wraps the body limit, so a refused oversized write is
    # on record too.
    app.add_middleware(BodySizeLimit)
    app.add_middleware(AuditTrail, store=store)
    app.add_middleware(loop_trace.TraceParent)
    app.include_router(health.router)
    app.include_router(metrics.router)
    app.include_router(nodes.node_router)
    app.include_router(peers.router)
    app.include_router(steps.router)
    for module in (
        agents,
        models,
        tasks,
        own_loop,
        own_loop_responses,
        loop_approvals,
        loop_trace,
        checkpoints,
        events,
        nodes,
        node_pools,
        tenants,
        keys,
        audit,
    ):
        app.include_router(module.router, dependencies=[Depends(authenticate)])
    # The fleet gauges read the store's fleet table when /metrics is scraped.
    watch_fleet(lambda: fleet_reading(store.fleet.list()))
    watch_tasks(
        lambda: task_reading(
            store.fleet.list(),
            store.tasks.list(status="waiting_for_gpu", limit=ALERT_SCAN),
            store.tasks.list(status="running", limit=ALERT_SCAN),
            stuck=store.tasks.count_stuck(),
            tenants=[t.name for t in store.tenants.list()],
            models=[m.entry.name for m in store.models.list() if m.entry.provider == "self-hosted"],
        )
    )
    # Tasks stuck or ended in Temporal are shown as such (orchestrator/reconcile/reconciler.py says why here).
    reconciler = Reconciler(
        store,
        temporal.client,
        holder=f"{config.control_plane_id}/api-{os.getpid()}",
        every_s=config.reconcile_every_s,
        batch=config.reconcile_batch,
    )
    fleet_history = ui.install(app, store)
    mcp = mount_mcp(app, store)
    return app


def build_app(config: BerthConfig) -> FastAPI:
    """The app as `berth server` runs it: the store at the configured URL, Temporal at its address."""
    credentials = temporal_connect_options(config)  # before anything starts: a bad setting stops the server here
    install_metrics("berth-api")
    store = Store.open(config.resolved_database_url)
    temporal = TemporalGateway(config.resolved_temporal_address, config.temporal_namespace, credentials=credentials)
    return create_app(config, store, temporal)


async def _warm_model_tokenizers(config: BerthConfig, catalogue: ModelCatalogue) -> None:
    """Load the own tokenizer of every catalogue model that names one (a model added later loads at its first step)."""
    entries = await asyncio.to_thread(lambda: [e for name in catalogue.names() if (e := catalogue.get(name))])
    await tokenizers_under(config.data_dir).warm(entries)
