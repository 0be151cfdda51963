"""The pages that follow the fleet live (GET): Overview, Fleet and Models, each with its panel route.

A page is its header and a panel; the panel (`/panels/<page>`) is what live.js fetches again when the
pulse says the fleet changed, so a refreshed panel is drawn by the same code as the first one. Every chart of a
page spans the window its `window` parameter names (15m, 1h, 6h or 24h; the hour by default), whatever its data
covers, and the panel is fetched with the same window.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse

from sdk import CatalogueModel
from sdk.wire.task_events import ModelCallEvent, events_of

from ..api.auth import refusal_of
from ..api.principal import FLEET_READERS
from ..api.services import Services, services
from .charts import Window, sparkline, time_chart
from .fleet_history import DEFAULT_WINDOW, WINDOW_WORDS, FleetCharts, FleetHistory, chart_window, node_gpus
from .foresight import WINDOW_WORDS as UNLOAD_WINDOW_WORDS
from .foresight import duration, foresight_view, unload_window
from .model_history import ttft_history
from .overview import models_in_window, overview
from .rendering import Flash, render
from .session_auth import Viewer, signed_in

router = APIRouter(include_in_schema=False)
Signed = Annotated[Viewer, Depends(signed_in)]
Svc = Annotated[Services, Depends(services)]
# The charts' window, by name (fleet_history.WINDOWS); checked by chart_window, which names the parameter.
ChartWindow = Annotated[str, Query(max_length=8)]
PAGES = {
    "overview": ("overview.html", "overview_live.html"),
    "fleet": ("fleet.html", "fleet_live.html"),
    "models": ("models.html", "models_live.html"),
}


@router.get("/", response_class=HTMLResponse)
async def overview_page(
    request: Request, svc: Svc, viewer: Signed, window: ChartWindow = DEFAULT_WINDOW
) -> HTMLResponse:
    return render(request, "overview.html", viewer, **await _overview(request, svc, viewer, window))


@router.get("/fleet", response_class=HTMLResponse)
async def fleet_page(request: Request, svc: Svc, viewer: Signed, window: ChartWindow = DEFAULT_WINDOW) -> HTMLResponse:
    return await show_fleet(request, svc, viewer, window=window)


@router.get("/models", response_class=HTMLResponse)
async def models_page(request: Request, svc: Svc, viewer: Signed, window: ChartWindow = DEFAULT_WINDOW) -> HTMLResponse:
    return await show_models(request, svc, viewer, window=window)


@router.get("/panels/{page}", response_class=HTMLResponse)
async def panel(
    request: Request, page: str, svc: Svc, viewer: Signed, window: ChartWindow = DEFAULT_WINDOW
) -> HTMLResponse:
    """A live page's panel alone, as live.js swaps it in."""
    if page not in PAGES:
        return render(
            request,
            "error.html",
            viewer,
            status=404,
            heading="Not found",
            message=f"page: {page!r} is not one of {', '.join(PAGES)}",
        )
    panels: dict[str, Callable[[Request, Services, Viewer, str], Awaitable[dict[str, Any]]]]
    panels = {"overview": _overview, "fleet": _fleet, "models": _models}
    context = panels[page]
    return render(request, PAGES[page][1], viewer, **await context(request, svc, viewer, window))


async def show_fleet(
    request: Request,
    svc: Services,
    viewer: Viewer,
    *,
    flash: Flash | None = None,
    status: int = 200,
    window: str = DEFAULT_WINDOW,
) -> HTMLResponse:
    context = await _fleet(request, svc, viewer, window)
    return render(request, "fleet.html", viewer, flash=flash, status=status, **context)


async def show_models(
    request: Request,
    svc: Services,
    viewer: Viewer,
    *,
    flash: Flash | None = None,
    status: int = 200,
    typed: tuple[str, dict[str, str]] | None = None,
    window: str = DEFAULT_WINDOW,
) -> HTMLResponse:
    """The models page; `typed` is (model, form fields) of a refused policy form, shown as typed."""
    context = await _models(request, svc, viewer, window, typed=typed)
    return render(request, "models.html", viewer, flash=flash, status=status, **context)


async def _charts(request: Request, svc: Services, window: Window) -> FleetCharts:
    """The fleet's samples over `window`, from the store (any replica's, and from before a restart)."""
    history: FleetHistory | None = getattr(request.app.state, "fleet_history", None)
    if history is None:
        return FleetCharts([], window)
    return await svc.db(history.charts, window)


def _windows(page: str, chosen: str) -> dict[str, Any]:
    """What a page needs to offer its windows: the chosen one, and each one's link and words."""
    path = "/" if page == "overview" else f"/{page}"
    return {
        "window_name": chosen,
        "window_links": {name: (f"{path}?window={name}", words) for name, words in WINDOW_WORDS.items()},
        "panel_url": f"/panels/{page}?window={chosen}",
    }


async def _overview(request: Request, svc: Services, viewer: Viewer, window_name: str) -> dict[str, Any]:
    window = chart_window(window_name)
    figures = await svc.db(overview, svc.store, viewer.principal.tenant, window.end, window.start)
    fleet = await _charts(request, svc, window)
    calls = await svc.db(svc.store.events.recent, (ModelCallEvent.KIND,), window.start, viewer.principal.tenant)
    ttft = ttft_history(events_of(ModelCallEvent, calls), window)
    return {
        **_windows("overview", window_name),
        "figures": figures,
        "window": window,
        "averaged": fleet.averaged,
        "tokens_chart": time_chart(
            "chart-tokens", [fleet.thin(figures.tokens_per_minute)], window, "tokens/min", kind="bars"
        ),
        "replicas_chart": time_chart("chart-replicas", fleet.replicas(), window, "replicas", whole=True),
        "utilization_chart": time_chart("chart-gpu-utilization", fleet.gpu_utilization(), window, "%", top=100),
        "memory_chart": time_chart("chart-gpu-memory", fleet.gpu_memory(), window, "GiB"),
        "ttft_sparks": {
            model: sparkline(f"spark-ttft-{i}", f"{model} time to first token", series, window, "s")
            for i, (model, series) in enumerate(sorted(ttft.items()))
        },
    }


async def _fleet(request: Request, svc: Services, viewer: Viewer, window_name: str) -> dict[str, Any]:
    refusal = refusal_of(viewer.principal, FLEET_READERS, "see the fleet's nodes and replicas", fleet_wide=True)
    if refusal is not None:  # the same rule as GET /v1/nodes (api/auth.py FleetReader)
        raise refusal
    await svc.db(svc.store.node_admission.drop_stale, svc.config.pending_node_ttl_s)
    nodes = await svc.db(svc.store.fleet.list)
    replicas = [r for n in nodes for r in n.replicas]
    served = await svc.db(svc.store.ledger.last_served, [f"{r.node_id}/{r.replica_id}" for r in replicas])
    catalogue = {m.entry.name: m for m in await svc.db(svc.store.models.list)}
    by_dc: dict[str, list[Any]] = {}
    for node in nodes:
        by_dc.setdefault(node.datacenter, []).append(node)
    now = datetime.now(UTC)
    idle = {
        r.replica_id: _idle_timer(r, served.get(f"{r.node_id}/{r.replica_id}"), catalogue.get(r.model), now)
        for r in replicas
    }
    window = chart_window(window_name, now)
    fleet = await _charts(request, svc, window)
    sparks = {}
    for i, node in enumerate(nodes):
        memory, busy = fleet.node_series(node.node_id)
        sparks[node.node_id] = (
            sparkline(f"spark-memory-{i}", f"{node.node_id} GPU memory in use", [memory], window, "GiB"),
            sparkline(f"spark-utilization-{i}", f"{node.node_id} GPU utilization", [busy], window, "%"),
        )
    return {
        **_windows("fleet", window_name),
        "datacenters": dict(sorted(by_dc.items())),
        "replicas": replicas,
        "idle": idle,
        "window": window,
        "gpus": {n.node_id: node_gpus(n.gpus) for n in nodes},
        "sparks": sparks,
        "steps_on": {n.node_id: sum(r.active_leases for r in n.replicas) for n in nodes},
    }


async def _models(
    request: Request,
    svc: Services,
    _viewer: Viewer,
    window_name: str,
    typed: tuple[str, dict[str, str]] | None = None,
) -> dict[str, Any]:
    window = chart_window(window_name)
    models = await svc.db(svc.store.models.list)
    replicas = await svc.db(svc.store.fleet.replicas)
    calls = await svc.db(svc.store.events.recent, (ModelCallEvent.KIND,), window.start)
    ttft = ttft_history(events_of(ModelCallEvent, calls), window)
    return {
        **_windows("models", window_name),
        "models": models,
        "replicas": replicas,
        "typed": typed,
        "window": window,
        "figures": await svc.db(models_in_window, svc.store, window.start),
        "foresight": {m.entry.name: foresight_view(m) for m in models},
        "windows": {m.entry.name: unload_window(m) for m in models},
        "window_words": UNLOAD_WINDOW_WORDS,
        "duration": duration,
        "ttft_sparks": {
            m.entry.name: sparkline(
                f"spark-ttft-{i}", f"{m.entry.name} time to first token", ttft.get(m.entry.name, []), window, "s"
            )
            for i, m in enumerate(models)
        },
    }


def _idle_timer(replica: Any, last_served: datetime | None, model: CatalogueModel | None, now: datetime) -> str:
    """ "idle 40 s (unloads in ~4 min)" for a warm replica serving nothing; "" otherwise.

    Idle since its last finished call, or since it loaded; the pool's own clock decides the unload,
    so the page says "~". The window is the policy's fixed one, else the first replica's learned one."""
    if replica.state != "warm" or replica.active_leases > 0:
        return ""
    since = last_served or replica.updated_at or now
    idle_s = max(0.0, (now - since).total_seconds())
    text = f"idle {duration(idle_s)}"
    window = unload_window(model)
    if window is not None:
        window_s, source = window
        left = window_s - idle_s
        by = "" if source == "operator" else f", {source} window"
        text += f" (unloads in ~{duration(left)}{by})" if left > 0 else f" (due to unload{by})"
    elif model is not None:
        text += " (idle window not learned yet)"
    return text
