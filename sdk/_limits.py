"""Bounds on what a client may ask for.

They exist so that a typo (an extra zero on a budget, a pasted file as input) is refused
with a clear reason instead of being accepted and costing money or memory later.
"""

from typing import Annotated

from pydantic import Field

MAX_TOKEN_BUDGET = 100_000_000  # 100 M tokens is about $1,500 at frontier prices: anything above is a typo
MAX_USD_BUDGET = 10_000.0
MAX_INPUT_CHARS = 200_000  # about 50 k tokens, a quarter of a large context window
MAX_STEPS = 10_000
MAX_TOKENS_PER_STEP = 32_768
MIN_ANSWER_TOKENS = 16  # a call that cannot afford this many answer tokens is not worth making
NAME_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,62}$"
TASK_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
MAX_TOOL_RESULT_CHARS = 32_000  # tool results pass through workflow history: keep them bounded
# The store's integers are 64-bit signed (SQLite, Postgres BIGINT): a larger sequence number or offset
# cannot even be looked up, and must be refused by name rather than fail in the database driver.
MAX_STORED_INT = 2**63 - 1
# A count, sequence number or row id that lands in a store column.
StoredInt = Annotated[int, Field(ge=0, le=MAX_STORED_INT)]
