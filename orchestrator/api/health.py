"""Liveness and readiness.

/healthz says the process runs (a restart is the cure when it does not answer). /readyz
says the server can do its job: the store answers a query and Temporal answers for our
namespace; a load balancer sends no traffic until both do, and the body says which is down.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from .errors import error_body
from .services import Services, Svc
from .temporal_gateway import HEALTH_TIMEOUT_S, TemporalUnavailable

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "a dependency is down; `checks` says which"}})
async def readyz(svc: Svc) -> JSONResponse:
    checks = {"store": await _check_store(svc), "temporal": await _check_temporal(svc)}
    down = {name: result for name, result in checks.items() if result != "ok"}
    if not down:
        return JSONResponse({"status": "ready", "checks": checks})
    message = "; ".join(f"{name} is down: {reason}" for name, reason in down.items())
    body: dict[str, Any] = error_body("unavailable", message)
    body["checks"] = checks
    return JSONResponse(body, status_code=503)


async def _check_store(svc: Services) -> str:
    try:
        await svc.db(svc.store.tasks.list, limit=1)
    except Exception as exc:  # any failure of the database is "not ready", with its reason
        return f"{type(exc).__name__}: {exc}"
    return "ok"


async def _check_temporal(svc: Services) -> str:
    try:
        await asyncio.wait_for(svc.temporal.check(), HEALTH_TIMEOUT_S + 2)
    except (TimeoutError, TemporalUnavailable) as exc:
        return str(exc) or "no answer in time"
    return "ok"
