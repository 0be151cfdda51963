"""Reading the UI's forms: url-encoded bodies into plain fields, and pydantic's refusals into one sentence.

The UI's forms are plain `application/x-www-form-urlencoded` posts, so no multipart parser is
needed; a field sent twice keeps its last value, as a browser would only send one.
"""

from __future__ import annotations

from typing import TypeVar
from urllib.parse import parse_qsl

from fastapi import Request
from pydantic import BaseModel, ValidationError

from ..api.errors import ApiError, field_of, invalid

M = TypeVar("M", bound=BaseModel)


async def read_form(request: Request) -> dict[str, str]:
    body = (await request.body()).decode("utf-8", errors="replace")
    return dict(parse_qsl(body, keep_blank_values=True))


def model_from_form(model: type[M], form: dict[str, str], fields: tuple[str, ...]) -> M:
    """`model` from the named form fields; an empty field is left out (the model's default applies).

    A refusal is an ApiError 422 naming the first field at fault, as the API answers."""
    values = {name: form[name].strip() for name in fields if form.get(name, "").strip() != ""}
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        raise refusal(exc) from None


def refusal(exc: ValidationError) -> ApiError:
    first = exc.errors()[0]
    field = field_of(first.get("loc", ())) or None
    message = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    return invalid(field, f"{field}: {message}" if field else message)
