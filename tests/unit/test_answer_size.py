"""The LLM step's planning rule (sdk/wire/answer_size.py), with no engine, store or Temporal: what a call may ask
for once its prompt is counted, and when it is not worth making."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sdk.wire.answer_size import size_answer
from sdk.wire.attempts import Attempts, BookedAttempt
from sdk.wire.limits import MIN_ANSWER_TOKENS
from sdk.wire.prices import Prices

tokens = st.integers(min_value=0, max_value=100_000)


@given(room=tokens, allowance=tokens, prompt=tokens, lost=tokens, granted=st.none() | tokens)
def test_an_answer_and_its_prompt_never_pass_what_dead_attempts_leave_of_the_allowance(
    room: int, allowance: int, prompt: int, lost: int, granted: int | None
) -> None:
    progress = Attempts(2, lost_before=lost)
    answer = size_answer(room, allowance, None, prompt, progress, None, granted=granted)
    assert answer.max_tokens <= room and (granted is None or answer.max_tokens <= granted)
    assert answer.max_tokens <= 0 or prompt + answer.max_tokens + lost <= allowance
    assert answer.budget_limited == (answer.max_tokens < room)


def test_a_call_that_asks_for_less_than_the_minimum_is_affordable_when_it_can_have_all_of_it() -> None:
    small = size_answer(5, 1_000, None, 100, Attempts(1), None)
    assert (small.max_tokens, small.budget_limited, small.affordable) == (5, False, True)
    cut = size_answer(500, 100 + MIN_ANSWER_TOKENS - 1, None, 100, Attempts(1), None)
    assert (cut.budget_limited, cut.affordable) == (True, False)


def test_dollars_booked_by_earlier_attempts_are_held_back_and_a_shortfall_is_what_a_minimum_answer_lacks() -> None:
    prices = Prices.per_million(1_000_000.0, 1_000_000.0)  # a dollar a token, for round numbers
    assert prices is not None
    progress = Attempts(2, booked=[BookedAttempt(attempt=1, tokens=10, usd=10.0, response_id="r1")])
    answer = size_answer(500, 10_000, 100.0, 50, progress, prices)
    assert answer.max_tokens == 100 - 10 - 50  # the dollars left after the booked reply and the prompt
    short = size_answer(500, 10_000, 60.0, 50, progress, prices)
    assert short.shortfall_usd == 50 + MIN_ANSWER_TOKENS - (60 - 10)
