"""A refusal that names its field from where pydantic cannot tell it: a rule across fields.

A model validator that raises ValueError is reported at the model itself (no field), so the API answers
`field: null` and a client cannot tell what to fix. Raising this error instead puts the refusal at the
field to blame (`min_replicas`, `gpus.3.index`); pydantic prefixes the location of an enclosing model.
"""

from __future__ import annotations

from pydantic import ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError


def refused_at(model: str, loc: tuple[str | int, ...], message: str, value: object) -> ValidationError:
    """The ValidationError of `model` refusing `value` at `loc` for `message` (raise it from a validator)."""
    error = InitErrorDetails(type=PydanticCustomError("value_error", message), loc=loc, input=value)
    return ValidationError.from_exception_data(model, [error])
