"""The reserve rule of a step (sdk/wire/reserve.py): the one place the activity, the control plane and the
workflow size a call from, so an answer it grants plus the prompt it reserved never passes the allowance."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from sdk import CheckpointRef
from sdk.wire.contracts import LlmStepInput
from sdk.wire.lease import StepLimits
from sdk.wire.limits import MAX_STORED_INT, reservation_margin
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


def _step_input(allowance: object) -> LlmStepInput:
    checkpoint = CheckpointRef(id=1, seq=1, step=1, hash="h")
    return LlmStepInput.model_validate(
        {
            "task_id": "t",
            "step": 1,
            "checkpoint": checkpoint,
            "model": "m",
            "max_tokens": 64,
            "token_allowance": allowance,
        }
    )


def _limits(allowance: object) -> StepLimits:
    return StepLimits.model_validate({"max_tokens": 64, "token_allowance": allowance})


def test_the_step_input_and_the_lease_limits_carry_the_one_token_allowance_with_json_unchanged() -> None:
    step, limits = _step_input(1234), _limits(1234)
    assert step.model_dump(mode="json")["token_allowance"] == limits.model_dump(mode="json")["token_allowance"] == 1234
    assert _step_input(step.model_dump(mode="json")["token_allowance"]).token_allowance == 1234
    # An overdrawn budget leaves nothing to book: read as 0 by both, never refused (it would stall the workflow).
    assert _step_input(-5).token_allowance == _limits(-5).token_allowance == 0
    with pytest.raises(ValidationError):
        _step_input(MAX_STORED_INT + 1)
    with pytest.raises(ValidationError):
        _limits(MAX_STORED_INT + 1)
