"""The engine replays a finished reply only to the same request, and only if it fits."""

from __future__ import annotations

from orchestrator.engines.replay import FinishedReplies, fingerprint


def test_replay_needs_the_same_conversation_and_room_for_the_reply() -> None:
    replies: FinishedReplies[str] = FinishedReplies(size=2)
    same = fingerprint("m", [{"role": "user", "content": "hi"}], None)
    replies.remember("t/1", same, 50, "reply-1")
    assert replies.get("t/1", same, 50) == "reply-1"
    assert replies.get("t/1", same, 49) is None  # a longer reply than the retry may spend
    assert replies.get("t/1", fingerprint("m", [{"role": "user", "content": "other"}], None), 50) is None
    assert replies.get("t/2", same, 50) is None and replies.get(None, same, 50) is None
    replies.remember("t/2", same, 1, "reply-2")
    replies.remember("t/3", same, 1, "reply-3")
    assert replies.get("t/1", same, 50) is None  # forgotten: only the last two are kept
