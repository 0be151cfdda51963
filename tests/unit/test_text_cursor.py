"""The offset and reset logic that keeps a client's text of a step exactly the step's text (api/text_cursor.py)."""

from __future__ import annotations

from orchestrator.api.text_cursor import Change, Delta, Reset, TextCursor


def held_by_client(changes: list[Change], text: str = "") -> str:
    """What a client holds after applying `changes` as sdk/_stream.py tells it to."""
    for change in changes:
        text = text[: change.offset] + change.text if isinstance(change, Delta) else text[: change.offset]
    return text


def test_pieces_of_one_source_become_deltas_at_their_offsets() -> None:
    cursor = TextCursor()
    changes = cursor.take(0, "Ber") + cursor.take(0, "Berth ") + cursor.take(6, "runs")
    assert changes == [Delta(0, "Ber"), Delta(3, "th "), Delta(6, "runs")]
    assert held_by_client(changes) == cursor.held == "Berth runs"


def test_text_sent_again_from_the_start_is_not_repeated() -> None:
    cursor = TextCursor()
    cursor.take(0, "Berth runs")
    assert cursor.take(0, "Berth") == []
    assert cursor.take(0, "Berth runs agents") == [Delta(10, " agents")]


def test_a_continuation_from_a_shorter_cut_text_that_writes_the_same_sends_only_what_is_new() -> None:
    cursor = TextCursor()
    cursor.take(0, "The answer is forty")
    # the attempt that took over continues the last heartbeat's text ("The answer") and writes it again
    assert cursor.take(0, "The answer") == []
    assert cursor.take(10, " is forty-two") == [Delta(19, "-two")]


def test_a_continuation_that_writes_otherwise_resets_where_it_departs() -> None:
    cursor = TextCursor()
    sent = cursor.take(0, "The answer is forty")
    changes = cursor.take(0, "The answer") + cursor.take(10, " was six")
    assert changes == [Reset(11), Delta(11, "was six")]
    assert held_by_client(sent + changes) == "The answer was six"


def test_an_attempt_that_starts_over_resets_to_the_start() -> None:
    cursor = TextCursor()
    sent = cursor.take(0, "Hello")
    changes = cursor.take(0, "Good day")
    assert changes == [Reset(0), Delta(0, "Good day")]
    assert held_by_client(sent + changes) == "Good day"


def test_a_source_ending_shorter_than_what_was_sent_resets_to_its_length() -> None:
    cursor = TextCursor()
    cursor.take(0, "Hello there")
    cursor.take(0, "Hello")
    assert cursor.end(5) == [Reset(5)]
    assert cursor.end(5) == []


def test_settling_gives_the_missing_tail_or_a_reset_and_the_text() -> None:
    missed = TextCursor()
    sent = missed.take(0, "The ans")
    assert missed.settle("The answer.") == [Delta(7, "wer.")]
    other = TextCursor(held="The answer is nine")
    assert other.settle("The answer.") == [Reset(10), Delta(10, ".")]
    assert held_by_client(sent + [Delta(7, "wer.")]) == "The answer."
    assert TextCursor(held="partial").settle("") == [Reset(0)]


def test_a_gap_is_left_for_a_later_source() -> None:
    cursor = TextCursor()
    assert cursor.take(4, "later") == []
    assert cursor.take(0, "now later") == [Delta(0, "now later")]


def test_a_resuming_caller_gets_only_what_lies_past_what_it_holds() -> None:
    cursor = TextCursor(skip=6)
    assert cursor.take(0, "Berth") == []
    assert cursor.take(0, "Berth runs") == [Delta(6, "runs")]
    # an attempt that departs below what the caller held still resets it
    assert cursor.take(0, "Bert!") == [Reset(4), Delta(4, "!")]


def test_any_sequence_of_sources_leaves_the_client_with_the_settled_text() -> None:
    sources = [(0, "alpha beta"), (0, "alpha"), (5, " gamma"), (0, "x"), (0, "xy"), (2, "z")]
    cursor = TextCursor()
    changes: list[Change] = []
    for offset, text in sources:
        changes += cursor.take(offset, text)
        assert held_by_client(changes) == cursor.held
    changes += cursor.settle("alpha gamma!")
    assert held_by_client(changes) == "alpha gamma!"
