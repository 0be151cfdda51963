"""The traffic book's prompt percentile is read at every ask; it is kept between asks, and must always equal the
percentile of the samples in the window at that moment."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.pool.traffic import PROMPT_PERCENTILE, UNSEEN_PROMPT_TOKENS, TrafficBook

WINDOW_S = 10.0


def _percentile_of(samples: list[tuple[float, int]], now: float) -> int:
    recent = sorted(p for at, p in samples if now - at <= WINDOW_S)
    if not recent:
        return UNSEEN_PROMPT_TOKENS
    return recent[min(math.ceil(PROMPT_PERCENTILE * len(recent)) - 1, len(recent) - 1)]


# Each event: a pause (the clock only moves forward), then an ask with a prompt or a read.
events = st.lists(
    st.tuples(st.floats(min_value=0, max_value=6, allow_nan=False), st.one_of(st.none(), st.integers(0, 100_000))),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(events)
def test_the_kept_percentile_is_always_the_windows_own(script: list[tuple[float, int | None]]) -> None:
    book = TrafficBook(window_s=WINDOW_S)
    asked: list[tuple[float, int]] = []
    now = 0.0
    for pause, prompt in script:
        now += pause
        if prompt is not None:
            book.asked("m", now, prompt)
            asked.append((now, prompt))
        assert book.prompt_tokens("m", now) == _percentile_of(asked, now)


def test_a_sample_leaving_the_window_changes_the_answer_without_a_new_ask() -> None:
    book = TrafficBook(window_s=WINDOW_S)
    book.asked("m", 0.0, 9000)
    book.asked("m", 5.0, 100)
    assert book.prompt_tokens("m", 6.0) == 9000
    assert book.prompt_tokens("m", 10.5) == 100  # the 9,000-token prompt is older than the window now
    assert book.prompt_tokens("m", 15.5) == UNSEEN_PROMPT_TOKENS
