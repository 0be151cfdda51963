"""The reserve rule of a step (sdk/wire/reserve.py): the one place the activity, the control plane and the
workflow size a call from, so an answer it grants plus the prompt it reserved never passes the allowance."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sdk.wire.limits import reservation_margin
from sdk.wire.reserve import answer_grant, prompt_reserve, tokens_short

tokens = st.integers(min_value=0, max_value=1_000_000)


@given(room=tokens, allowance=tokens, prompt=tokens, usd=st.none() | tokens)
def test_a_grant_and_its_prompt_never_pass_the_allowance_nor_the_room(
    room: int, allowance: int, prompt: int, usd: int | None
) -> None:
    grant = answer_grant(room, allowance, prompt, usd)
    assert grant <= room and (usd is None or grant <= usd)
    assert max(grant, 0) + prompt <= allowance or grant <= 0


@given(prompt=tokens, answer=tokens, allowance=tokens)
def test_what_is_short_is_exactly_what_a_grant_of_that_answer_lacks(prompt: int, answer: int, allowance: int) -> None:
    short = tokens_short(prompt, answer, allowance)
    assert (answer_grant(answer, allowance, prompt) >= answer) == (short <= 0)
    assert answer_grant(answer, allowance + max(short, 0), prompt) == answer


def test_a_prompt_reserve_is_its_count_and_the_margin_for_what_the_count_may_miss() -> None:
    assert prompt_reserve(1000) == 1000 + reservation_margin(1000) == 1028
    assert prompt_reserve(1000, exact=True) == 1000
    assert prompt_reserve(1000, exact=True, continued_tokens=500) == 1000 + 500 // 50 + 8
