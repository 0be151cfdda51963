"""What an LLM step's attempts carry between them: tokens lost, tokens kept, and the text to continue."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sdk.wire.attempts import Attempts, BookedAttempt
from sdk.wire.contracts import GenerationProgress, UnresolvedAttempt
from sdk.wire.limits import MAX_PREFIX_CHARS
from sdk.wire.prefix import carried_prefix, continuable


def _cut(chunks: list[tuple[str, int]], attempt: int = 1) -> GenerationProgress:
    progress = Attempts(attempt)
    for text, tokens in chunks:
        progress.wrote(text, tokens, plain=True)
    return progress.progress()


def test_the_heartbeat_carries_the_text_written_so_far() -> None:
    details = _cut([("The answer ", 2), ("is long.", 3)])
    assert (details.prefix, details.prefix_tokens, details.prefix_own, details.generated) == (
        "The answer is long.",
        5,
        5,
        5,
    )
    assert continuable(carried_prefix(details), max_tokens=5 + 16)
    assert not continuable(carried_prefix(details), max_tokens=5 + 15)


def test_a_reply_that_turns_into_tool_calls_carries_no_text_to_continue() -> None:
    progress = Attempts(1)
    progress.wrote("Let me look", 3, plain=True)
    progress.wrote('{"query": "x"}', 6, plain=False)
    progress.wrote("more", 1, plain=True)
    details = progress.progress()
    assert details.generated == 10 and details.prefix == ""


def test_text_past_the_cap_is_not_carried() -> None:
    progress = Attempts(1)
    progress.wrote("x" * (MAX_PREFIX_CHARS - 10), 100, plain=True)
    progress.wrote("y" * 20, 5, plain=True)
    progress.wrote("z", 1, plain=True)
    details = progress.progress()
    assert len(details.prefix) == MAX_PREFIX_CHARS - 10 and details.prefix_own == 100
    assert details.generated == 106


def test_a_continuation_keeps_the_cut_attempts_text_and_loses_the_rest() -> None:
    dead = _cut([("abc", 4)], attempt=2).model_copy(
        update={"generated": 7, "unresolved": [UnresolvedAttempt(attempt=1, generated=5)], "lost_before": 2}
    )
    taking_over = Attempts.resume(101, dead)
    held = taking_over.held_back
    settled = taking_over.continue_prefix()
    assert [(d.attempt, d.generated, d.kept) for d in settled] == [(1, 5, 0), (2, 7, 4)]
    assert (taking_over.kept_before, taking_over.lost_before) == (4, 2 + 5 + 3)
    assert taking_over.held_back == held  # the budget holds the same tokens back, only named apart
    assert (taking_over.prefix, taking_over.prefix_tokens) == ("abc", 4)
    taking_over.wrote("def", 2, plain=True)
    details = taking_over.progress()
    assert (details.prefix, details.prefix_tokens, details.prefix_own, details.kept_before) == ("abcdef", 6, 2, 4)


@given(st.lists(st.tuples(st.text(max_size=40), st.integers(0, 8), st.booleans()), max_size=40), st.integers(0, 50))
def test_kept_and_lost_always_add_up_to_what_was_generated(chunks: list[tuple[str, int, bool]], beyond: int) -> None:
    progress = Attempts(1)
    for text, tokens, plain in chunks:
        progress.wrote(text, tokens, plain)
    details = progress.progress().model_copy(update={"generated": progress.generated + beyond})  # past the last beat
    taking_over = Attempts.resume(101, details)
    if taking_over.carried is None:
        assert not "".join(progress.written)
        return
    settled = taking_over.continue_prefix()
    assert sum(d.generated for d in settled) == progress.generated + beyond
    assert taking_over.kept_before + taking_over.lost_before == progress.generated + beyond
    assert 0 <= taking_over.kept_before <= progress.generated and taking_over.prefix == "".join(progress.written)


def test_a_heartbeat_is_read_as_progress_only_when_it_is_progress() -> None:
    progress = GenerationProgress(attempt=2, generated=7)
    assert GenerationProgress.from_details([progress.model_dump()]) == progress
    assert GenerationProgress.from_details([progress]) == progress
    for junk in (None, [], (), "text", [{"attempt": "many"}], [42]):
        assert GenerationProgress.from_details(junk) is None


def test_an_attempt_that_booked_its_reply_before_it_died_is_not_also_lost() -> None:
    """Attempt 1 settled (its 40 + 60 tokens booked) and died before Temporal heard; the retry's engine did not
    replay that reply. Its 60 streamed tokens are the booked reply's, reported for the workflow to charge, not
    lost as well: counted twice, they could pass the attempt's grant and the control plane refuses them."""
    last = GenerationProgress(attempt=1, generated=60, response_id="r1")
    retry = Attempts.resume(2, last)
    retry.booked = [BookedAttempt(attempt=1, tokens=100, usd=0.0, response_id="r1")]

    lost = retry.resolve("r2")

    assert lost == []
    assert retry.lost_before == 0
    assert retry.unreported_tokens == 100  # the booked reply: real spend the workflow never saw


def test_a_dead_attempt_that_booked_nothing_is_lost_when_the_retry_gets_another_reply() -> None:
    retry = Attempts.resume(2, GenerationProgress(attempt=1, generated=60, response_id="r1"))

    lost = retry.resolve("r2")

    assert [u.attempt for u in lost] == [1]
    assert retry.lost_before == 60
