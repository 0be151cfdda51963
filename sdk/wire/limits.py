"""Bounds on what a client may ask for.

They exist so that a typo (an extra zero on a budget, a pasted file as input) is refused
with a clear reason instead of being accepted and costing money or memory later.
"""

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, field_validator
from pydantic_core import PydanticCustomError

MAX_TOKEN_BUDGET = 100_000_000  # 100 M tokens is about $1,500 at frontier prices: anything above is a typo
MAX_USD_BUDGET = 10_000.0
MAX_INPUT_CHARS = 200_000  # about 50 k tokens, a quarter of a large context window
MAX_STEPS = 10_000
MAX_TOKENS_PER_STEP = 32_768
MIN_ANSWER_TOKENS = 16  # a call that cannot afford this many answer tokens is not worth making
# A cut generation's text rides in every heartbeat (and an interruption's failure, in workflow history): past
# this many characters (~8 k tokens) its further text is not kept for a continuation.
MAX_PREFIX_CHARS = 32_000
# Dead attempts one generation's heartbeat may carry unresolved (a step retries at most a few times per placement).
MAX_ATTEMPTS_CARRIED = 64


def reservation_margin(counted_prompt_tokens: int, exact: bool = False, continued_tokens: int = 0) -> int:
    """Slack a reservation leaves for what its count may miss: the step, the control plane's step routes and the
    workflow's shortfall all reserve alike.

    Counted by OpenAI's formula (gpt-4o's tokenizer), an engine's chat template counts a little more (≈2% + 8).
    Counted by the model's own tokenizer and template (`exact`), the prompt is the engine's own count and needs
    no slack, except for the text a continuation re-sends: its `continued_tokens` are the engine's count of
    tokens it generated, and the same text tokenized again as part of a prompt may split a little differently
    (the margin's formula over that text alone)."""
    if not exact:
        return counted_prompt_tokens // 50 + 8
    return continued_tokens // 50 + 8 if continued_tokens > 0 else 0


NAME_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,62}$"
# A task id a client chooses. It is scoped to the task's tenant: the task's id is `<tenant>:<chosen id>`
# (orchestrator/api/task_ids.py), so no tenant can take, or learn of, another tenant's ids.
TASK_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
# A sub-agent's id extends its parent's after this mark, which no client-chosen id may hold: so an id with
# `<task>~` in front is that task's sub-agent, and no client can pre-empt (or pose as) one.
SUB_AGENT_MARK = "~"
# An id the server made (a client's id with its tenant in front, a sub-agent's): what naming a task accepts.
TASK_REF_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:~-]{0,254}$"
MAX_TASK_ID_CHARS = 255
MAX_TOOL_RESULT_CHARS = 32_000  # tool results pass through workflow history: keep them bounded
# A cancel reason is a sentence: it becomes the task's error, shown on every later refusal about the task.
MAX_REASON_CHARS = 500
MAX_MODEL_NAME_CHARS = 200  # a catalogue name is 128 at most; a hosted route (provider/model) a little more
MAX_PAGE = 500  # rows one list request returns
# OpenAI's API takes at most 128 tools in one request, and other providers fewer: what an agent's model is
# offered (its own tools, its MCP servers' and the built-ins) must fit.
MAX_MODEL_TOOLS = 128
# Each MCP server is a process or connection the tool worker holds (one per task for berth_token servers), and
# all their tools share the model's 128: sixteen servers of eight tools fill it.
MAX_MCP_SERVERS = 16
# The store's integers are 64-bit signed (SQLite, Postgres BIGINT): a larger sequence number or offset
# cannot even be looked up, and must be refused by name rather than fail in the database driver.
MAX_STORED_INT = 2**63 - 1


def _refuse_booleans(value: object) -> object:
    """pydantic's lax mode reads `true` as 1 (bool is an int in Python): a budget of `true` tokens is a client's
    mistake, never a one-token task. Strings stay accepted: the admin UI's forms send numbers as text."""
    if isinstance(value, bool):
        raise PydanticCustomError("number_not_boolean", "a number is required, not a boolean")
    return value


# Last in an Annotated, after the Field's bounds (which then still show in the JSON schema): `Annotated[int,
# Field(gt=0), NOT_A_BOOLEAN]`, for a tool's argument or a type of its own.
NOT_A_BOOLEAN = BeforeValidator(_refuse_booleans)


def numbers_not_booleans(*fields: str) -> Any:
    """The validator that refuses a boolean for any of a request model's number `fields`; assign it in the
    model's body: `_numbers = numbers_not_booleans("tokens", "usd")`. A validator rather than a type, so the
    fields keep their own bounds and JSON schema as they are."""
    return field_validator(*fields, mode="before")(_refuse_booleans)


# A count, sequence number or row id that lands in a store column.
StoredInt = Annotated[int, Field(ge=0, le=MAX_STORED_INT), NOT_A_BOOLEAN]
