"""Refusals a client can act on: a 405 says what is allowed, and a refusal of input names the field at fault.

A probe found OPTIONS answered 405 without a (complete) `Allow` header, which RFC 9110 (15.5.6) requires, and
422s for a body that is not JSON, not UTF-8 or not an object that named no field.
"""

from __future__ import annotations

import re

import httpx
import pytest
from fastapi.routing import iter_route_contexts

from tests.security.parties import error_of


def _methods_by_path(app) -> dict[str, set[str]]:
    """Every route's concrete path (each parameter filled with "1"), and the methods routes of that path serve."""
    paths: dict[str, set[str]] = {}
    for route in iter_route_contexts(app.routes):  # included routers walked through
        if route.methods and route.path:
            path = re.sub(r"\{[^}]+\}", "1", route.path)
            paths.setdefault(path, set()).update(route.methods)
    assert len(paths) > 50, sorted(paths)  # the app's routes, not only its top level
    return paths


def _allowed(answer: httpx.Response) -> set[str]:
    return {m.strip() for m in answer.headers.get("allow", "").split(",") if m.strip()}


async def test_options_on_a_resource_of_several_methods_lists_them_all(api: httpx.AsyncClient) -> None:
    answer = await api.options("/v1/tasks")
    assert answer.status_code == 405 and {"GET", "POST"} <= _allowed(answer), dict(answer.headers)
    assert error_of(answer)["code"] == "method_not_allowed"


async def test_every_routes_405_carries_allow_with_what_the_path_serves(app, api: httpx.AsyncClient) -> None:
    missing = {}
    for path, methods in sorted(_methods_by_path(app).items()):
        if "OPTIONS" in methods:
            continue
        answer = await api.options(path)
        if answer.status_code != 405 or not methods <= _allowed(answer):
            missing[path] = (answer.status_code, answer.headers.get("allow"), sorted(methods))
    assert missing == {}


@pytest.mark.parametrize(
    "body, content_type",
    [
        (b'{"agent": ', "application/json"),  # not JSON
        (b"\xff\xfe{}", "application/json"),  # not even UTF-8
        (b"[]", "application/json"),  # JSON, not an object
        (b"", "application/json"),  # no body at all
    ],
)
async def test_a_refused_body_names_the_body(api: httpx.AsyncClient, body: bytes, content_type: str) -> None:
    for path in ("/v1/tasks", "/v1/nodes/register"):
        refused = await api.post(path, content=body, headers={"content-type": content_type})
        assert refused.status_code == 422 and error_of(refused)["field"] == "body", (path, refused.text)
