"""One error shape for every refusal: `{"error": {"code", "message", "field"}}`.

Routes raise `ApiError`; FastAPI's own refusals (validation, unknown route, wrong method)
and anything unexpected are turned into the same shape here, so a client parses one thing.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import iter_route_contexts
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from sdk.wire.resources import ErrorBody

log = logging.getLogger("berth.api")

_CODES = {
    400: "invalid",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    402: "out_of_budget",
    409: "conflict",
    413: "too_large",
    422: "invalid",
    429: "rate_limited",
    500: "internal",
    502: "model_call_failed",
    503: "unavailable",
    504: "unavailable",
}

# Documents the shape in OpenAPI for the statuses routes can answer with.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": code}
    for status, code in (
        (401, "unauthorized"),
        (403, "forbidden"),
        (404, "not_found"),
        (409, "conflict"),
        (422, "invalid"),
        (503, "unavailable"),
    )
}


class ApiError(Exception):
    """A refusal with its HTTP status, a stable code, a reason and (when one is to blame) a field."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        field: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code or _CODES.get(status, "error")
        self.message = message
        self.field = field
        self.headers = headers


def invalid(field: str | None, message: str) -> ApiError:
    return ApiError(422, message, field=field)


def not_found(message: str, field: str | None = None) -> ApiError:
    return ApiError(404, message, field=field)


def conflict(message: str, field: str | None = None) -> ApiError:
    return ApiError(409, message, field=field)


def unavailable(message: str) -> ApiError:
    return ApiError(503, message)


def error_body(code: str, message: str, field: str | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "field": field}}


def error_response(
    status: int,
    message: str,
    *,
    field: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(
        error_body(code or _CODES.get(status, "error"), message, field), status_code=status, headers=headers
    )


BODY_FIELD = "body"  # the field a refusal names when the request body as a whole is at fault


def field_of(loc: tuple[Any, ...] | list[Any]) -> str | None:
    """`("body", "budget", "tokens")` -> "budget.tokens"; where the input came from is dropped. A fault of the
    body as a whole (not JSON, not an object, missing) names `body`: every refusal of input names its field."""
    parts = list(loc)
    whole_body = bool(parts) and parts[0] == "body"
    if parts and parts[0] in ("body", "query", "path", "header", "cookie"):
        parts = parts[1:]
    # A JSON syntax error is located by character offset, which names no field inside the body.
    if parts and isinstance(parts[-1], int) and len(parts) == 1:
        return BODY_FIELD if whole_body else None
    return ".".join(str(p) for p in parts) or (BODY_FIELD if whole_body else None)


def validation_refusal(exc: RequestValidationError) -> ApiError:
    """FastAPI's refusal of a path, query or body as one 422 naming the first field at fault (the UI shows the
    same refusal as a page)."""
    errors = exc.errors()
    if not errors:
        return invalid(None, "the request is not valid")
    first = errors[0]
    field = field_of(first.get("loc", ()))
    message = str(first.get("msg", "invalid value"))
    if first.get("type") == "missing" and field in (None, BODY_FIELD):
        field, message = BODY_FIELD, "a JSON request body is required"
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return invalid(field, message)


def allowed_methods(request: Request) -> str | None:
    """What a 405's `Allow` must say (RFC 9110 15.5.6): the methods of every route of the request's path. The router
    names only the first route it matched, so `GET /v1/tasks` hid `POST /v1/tasks` from an OPTIONS. Included
    routers are walked through (FastAPI keeps them whole in `app.routes`)."""
    methods: set[str] = set()
    for route in iter_route_contexts(request.app.routes):
        if route.methods and route.matches(request.scope)[0] is not Match.NONE:
            methods |= route.methods
    return ", ".join(sorted(methods)) or None


def install(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.message, field=exc.field, code=exc.code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        refusal = validation_refusal(exc)
        return error_response(refusal.status, refusal.message, field=refusal.field)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400 and isinstance(exc.__cause__, UnicodeDecodeError):
            # FastAPI answers a body that is not even UTF-8 with a bare 400; it is as unreadable as JSON that
            # does not parse, which is a 422, so a client meets one status for both.
            return error_response(422, f"the request body is not valid JSON: {exc.__cause__}", field=BODY_FIELD)
        headers = dict(getattr(exc, "headers", None) or {})
        allow = allowed_methods(request) if exc.status_code == 405 else None
        if allow:
            headers["Allow"] = allow
        return error_response(exc.status_code, str(exc.detail), headers=headers or None)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, f"internal error ({type(exc).__name__}); see the server log")
