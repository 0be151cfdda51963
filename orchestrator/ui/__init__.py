"""The admin web UI, served by the control-plane app at `/`: server-rendered pages over the same store,
tenant rules and route code as /v1, signed in with an API key into an HttpOnly session cookie.

`install` adds its routes, its static files (one CSS, a few scripts: nothing from a CDN; the API's /docs too), and
the refusal pages that UI requests get instead of the API's JSON errors.
"""

from __future__ import annotations

from collections.abc import Awaitable
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles

from ..api.errors import ApiError, error_response, validation_refusal
from ..store import Store
from . import actions, admin_pages, api_docs, fleet_pages, live, login, pages, task_list
from .fleet_history import FleetHistory
from .rendering import redirect, render
from .session_auth import CsrfRefused, SignInRequired, login_url, signed_in

STATIC_PREFIX = "/ui/static"
_HEADINGS = {
    401: "Not signed in",
    403: "Not allowed",
    404: "Not found",
    409: "Conflict",
    422: "Not valid",
    429: "Too many requests",
    503: "Unavailable",
}


def is_ui_path(path: str) -> bool:
    """Whether a request is the UI's (pages and forms) rather than the API's, health probes or node traffic."""
    return not path.startswith(("/v1/", "/v1", "/healthz", "/readyz", "/metrics", "/openapi.json", "/docs", "/mcp"))


def install(app: FastAPI, store: Store) -> FleetHistory:
    """Add the UI to `app`; the returned sampler is run by the app's lifespan for the replicas chart."""
    app.mount(STATIC_PREFIX, StaticFiles(directory=Path(__file__).parent / "static"), name="ui-static")
    api_docs.install(app)  # /docs from the package, not a CDN
    app.include_router(login.router)
    app.include_router(task_list.router)  # before fleet_pages: its /panels/tasks, not their /panels/{page}
    app.include_router(fleet_pages.router)
    app.include_router(live.router)
    app.include_router(pages.router)
    app.include_router(admin_pages.router)
    app.include_router(actions.router)
    api_error_handler = app.exception_handlers.get(ApiError)

    @app.exception_handler(SignInRequired)
    async def _sign_in(_request: Request, exc: SignInRequired) -> Response:
        return redirect(login_url(exc.next_path))

    @app.exception_handler(CsrfRefused)
    async def _csrf(request: Request, _exc: CsrfRefused) -> Response:
        return await error_page(
            request, 403, "the form's CSRF token is missing or wrong: reload the page and try again"
        )

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> Response:
        if is_ui_path(request.url.path):
            return await error_page(request, exc.status, exc.message)
        if api_error_handler is not None:
            return await _answer(api_error_handler(request, exc))
        return error_response(exc.status, exc.message, field=exc.field, code=exc.code, headers=exc.headers)

    validation_handler = app.exception_handlers.get(RequestValidationError)

    @app.exception_handler(RequestValidationError)
    async def _not_valid(request: Request, exc: RequestValidationError) -> Response:
        # A page's path or query out of bounds (a checkpoint seq beyond 64 bits) is a page naming the field.
        if is_ui_path(request.url.path):
            refusal = validation_refusal(exc)
            message = f"{refusal.field}: {refusal.message}" if refusal.field else refusal.message
            return await error_page(request, refusal.status, message)
        if validation_handler is not None:
            return await _answer(validation_handler(request, exc))
        refusal = validation_refusal(exc)
        return error_response(refusal.status, refusal.message, field=refusal.field)

    app.state.failed_logins = login.FailedSignIns()
    app.state.fleet_history = FleetHistory(store)
    return app.state.fleet_history


async def _answer(handled: Response | Awaitable[Response]) -> Response:
    """The API's own handler's answer: Starlette lets a handler be sync, so it may be no awaitable."""
    return handled if isinstance(handled, Response) else await handled


async def error_page(request: Request, status: int, message: str) -> Response:
    """A refusal as a page, with the menu when the request has a live session (a CSRF refusal or a 404 may not)."""
    try:
        viewer = await signed_in(request)
    except SignInRequired:
        viewer = None
    return render(
        request,
        "error.html",
        viewer,
        status=status,
        status_code=status,
        heading=_HEADINGS.get(status, "Refused"),
        message=message,
    )
