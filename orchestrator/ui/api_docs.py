"""The API's documentation pages, served with nothing from outside Berth.

FastAPI's own /docs loads Swagger UI's script and style from a CDN, so on a control plane without the internet
(an air-gapped cluster, a laptop on a train) it was a blank page; its /redoc did the same with ReDoc. Swagger UI's
files come with the `swagger-ui-bundle-v2` package (Apache-2.0, the upstream swagger-ui dist), served here under
DOCS_STATIC; /redoc, which nothing links to and no package ships offline, answers with /docs instead.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.routing import BaseRoute, Route
from swagger_ui_bundle import swagger_ui_path

DOCS_STATIC = "/docs/static"
REPLACED = ("/docs", "/docs/oauth2-redirect", "/redoc")


def install(app: FastAPI) -> None:
    """Serve /docs from the package's Swagger UI (replacing FastAPI's CDN page) and send /redoc to it."""
    docs_url, openapi_url = app.docs_url or "/docs", app.openapi_url or "/openapi.json"
    app.router.routes[:] = [r for r in app.router.routes if not _replaced(r)]
    app.mount(DOCS_STATIC, StaticFiles(directory=str(swagger_ui_path)), name="docs-static")

    @app.get(docs_url, include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} API",
            swagger_js_url=f"{DOCS_STATIC}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_STATIC}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_STATIC}/favicon-32x32.png",
            oauth2_redirect_url=f"{docs_url}/oauth2-redirect",
        )

    @app.get(f"{docs_url}/oauth2-redirect", include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> RedirectResponse:
        return RedirectResponse(docs_url, status_code=307)


def _replaced(route: BaseRoute) -> bool:
    return isinstance(route, Route) and route.path in REPLACED
