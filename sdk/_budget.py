"""The limits a task runs under."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ._errors import InvalidSpec
from .wire.limits import MAX_TOKEN_BUDGET, MAX_USD_BUDGET, numbers_not_booleans


class Budget(BaseModel):
    """A hard ceiling on what a task (its sub-agents included) may spend.

    `tokens` is always enforced. `usd` is enforced from litellm's price map or the model
    catalogue's per-token price. `deadline` is a wall-clock instant; a timedelta is taken as
    "from now" when the budget is made, so a budget can be built before submitting.
    """

    model_config = ConfigDict(extra="forbid")

    tokens: int = Field(gt=0, le=MAX_TOKEN_BUDGET, description="token limit, prompt and completion together")
    usd: float | None = Field(default=None, gt=0, le=MAX_USD_BUDGET, description="spend limit in US dollars")
    deadline: datetime | None = Field(default=None, description="instant after which no new step starts")

    _numbers = numbers_not_booleans("tokens", "usd")

    def __init__(self, tokens: int | None = None, **data: object) -> None:
        """`Budget(5000)` for an author; a bad value is refused as InvalidSpec naming `budget.<field>` and why,
        as the API would, not as a raw pydantic error. Validation inside a TaskSpec does not come here (marked
        as pydantic's own __init__, as RootModel's is), so its errors keep their place in the TaskSpec's."""
        if tokens is not None:
            data["tokens"] = tokens
        try:
            super().__init__(**data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(["budget", *map(str, first["loc"])])
            raise InvalidSpec(first["msg"], field=where) from exc

    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]  # a marker pydantic reads off the function

    @field_validator("deadline", mode="before")
    @classmethod
    def _deadline_from_timedelta(cls, value: object) -> object:
        if isinstance(value, timedelta):
            if value <= timedelta(0):
                raise ValueError("a relative deadline must be in the future")
            return datetime.now(UTC) + value
        if isinstance(value, datetime) and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value
