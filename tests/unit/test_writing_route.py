"""A running generation's text, from the board the activity writes to, through a node's peer server, to the
API's reader: every piece in order, ended as the generation ended, and only on a ticket for that very step."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from activities.step.writing_board import Generation, WritingBoard
from orchestrator.api.writing_sources import SourceEnd, SourceItem, SourcePiece, SourceStart, from_node
from orchestrator.node.peer_server import PeerServer
from orchestrator.node.peer_tickets import PeerTickets
from orchestrator.node.writing_route import writing_route
from orchestrator.store.peers import WritingSource
from sdk.wire.writing import (
    WRITING_PATH,
    WRITING_TICKET_HEADER,
    mint_writing_ticket,
    writing_key,
    writing_ticket_allows,
)

SECRET = "node-secret"


class NoFiles:
    def verified_path(self, sha256: str) -> Path | None:
        return None


@pytest.fixture
async def board_and_server() -> AsyncIterator[tuple[WritingBoard, PeerServer]]:
    board = WritingBoard()
    tickets = PeerTickets("http://127.0.0.1:9", "node-a", lambda: SECRET)
    server = PeerServer(NoFiles(), tickets, routes=[writing_route("node-a", lambda: SECRET, board)])
    await server.start()
    yield board, server
    await server.stop()
    await tickets.close()


async def collect(items: AsyncIterator[SourceItem]) -> list[SourceItem]:
    return [item async for item in items]


def test_a_ticket_allows_only_its_node_task_and_step_until_it_expires() -> None:
    key = writing_key(SECRET)
    ticket = mint_writing_ticket(key, "node-a", "acme:t1", 3, now=1000.0)
    assert writing_ticket_allows(ticket, key, "node-a", "acme:t1", 3, now=1000.0)
    assert not writing_ticket_allows(ticket, key, "node-b", "acme:t1", 3, now=1000.0)
    assert not writing_ticket_allows(ticket, key, "node-a", "acme:t2", 3, now=1000.0)
    assert not writing_ticket_allows(ticket, key, "node-a", "acme:t1", 4, now=1000.0)
    assert not writing_ticket_allows(ticket, writing_key("another"), "node-a", "acme:t1", 3, now=1000.0)
    assert not writing_ticket_allows(ticket, key, "node-a", "acme:t1", 3, now=1000.0 + 3600)
    assert not writing_ticket_allows("junk", key, "node-a", "acme:t1", 3, now=1000.0)


async def test_the_api_follows_a_generation_on_its_node_piece_by_piece(
    board_and_server: tuple[WritingBoard, PeerServer],
) -> None:
    board, server = board_and_server
    source = WritingSource("node-a", server.url, writing_key(SECRET))
    generation = board.start("acme:t1", 2, attempt=1, continued="The ")
    reading = asyncio.create_task(collect(from_node(source, "acme:t1", 2)))
    words = ["answer", " is", " forty", "-two."]
    for word in words:
        await asyncio.sleep(0.02)
        generation.write(word)
    generation.end("finished")
    items = await reading
    pieces = [item for item in items if isinstance(item, SourcePiece)]
    assert "".join(p.text for p in pieces) == "The answer is forty-two."
    assert [p.offset for p in pieces] == [sum(len(p.text) for p in pieces[:i]) for i in range(len(pieces))]
    assert items[-1] == SourceEnd(finished=True, length=len("The answer is forty-two."))


async def test_a_cut_generation_ends_as_cut_with_all_it_wrote(
    board_and_server: tuple[WritingBoard, PeerServer],
) -> None:
    board, server = board_and_server
    source = WritingSource("node-a", server.url, writing_key(SECRET))
    generation = board.start("acme:t1", 1, attempt=1, continued="")
    generation.write("half an")
    reading = asyncio.create_task(collect(from_node(source, "acme:t1", 1)))
    await asyncio.sleep(0.05)
    generation.write(" answer")
    generation.end("cut")
    items = await reading
    assert "".join(i.text for i in items if isinstance(i, SourcePiece)) == "half an answer"
    assert items[-1] == SourceEnd(finished=False, length=14)


async def test_the_node_refuses_a_ticket_for_another_step_or_none(
    board_and_server: tuple[WritingBoard, PeerServer],
) -> None:
    board, server = board_and_server
    board.start("acme:t1", 1, attempt=1, continued="secret text")
    url = f"{server.url}{WRITING_PATH}/acme:t1/1"
    other_step = mint_writing_ticket(writing_key(SECRET), "node-a", "acme:t1", 2)
    forged = mint_writing_ticket(writing_key("not the node's"), "node-a", "acme:t1", 1)
    async with httpx.AsyncClient() as http:
        assert (await http.get(url)).status_code == 403
        assert (await http.get(url, headers={WRITING_TICKET_HEADER: other_step})).status_code == 403
        assert (await http.get(url, headers={WRITING_TICKET_HEADER: forged})).status_code == 403
        missing = mint_writing_ticket(writing_key(SECRET), "node-a", "acme:t9", 1)
        assert (
            await http.get(f"{server.url}{WRITING_PATH}/acme:t9/1?wait_ms=0", headers={WRITING_TICKET_HEADER: missing})
        ).status_code == 404
    forged_source = WritingSource("node-a", server.url, writing_key("not the node's"))
    assert await collect(from_node(forged_source, "acme:t1", 1)) == []


async def test_a_one_shot_read_gives_the_text_so_far_of_a_generation_still_writing(
    board_and_server: tuple[WritingBoard, PeerServer],
) -> None:
    board, server = board_and_server
    generation = board.start("acme:t1", 1, attempt=2, continued="kept ")
    generation.write("and new")
    source = WritingSource("node-a", server.url, writing_key(SECRET))
    items = await collect(from_node(source, "acme:t1", 1, follow=False))
    assert items == [SourceStart(2), SourcePiece(0, "kept and new")]


async def test_a_reader_before_the_start_gets_the_attempt_once_it_starts_and_never_a_cut_one_again(
    board_and_server: tuple[WritingBoard, PeerServer],
) -> None:
    board, server = board_and_server
    source = WritingSource("node-a", server.url, writing_key(SECRET))
    early = asyncio.create_task(collect(from_node(source, "acme:t1", 1)))
    await asyncio.sleep(0.05)
    first = board.start("acme:t1", 1, attempt=1, continued="")
    first.write("abc")
    first.end("cut")
    assert await early == [SourceStart(1), SourcePiece(0, "abc"), SourceEnd(finished=False, length=3)]
    assert await collect(from_node(source, "acme:t1", 1, newer_than=1, wait_s=0.05)) == []
    later = asyncio.create_task(collect(from_node(source, "acme:t1", 1, newer_than=1)))
    await asyncio.sleep(0.05)
    second = board.start("acme:t1", 1, attempt=2, continued="ab")
    second.write("d")
    second.end("finished")
    assert await later == [SourceStart(2), SourcePiece(0, "abd"), SourceEnd(finished=True, length=3)]


async def test_a_new_attempt_replaces_the_cut_one_and_readers_of_the_old_one_see_it_end() -> None:
    board = WritingBoard()
    first = board.start("t", 1, attempt=1, continued="")
    first.write("abc")
    reading = asyncio.create_task(collect_pieces(first))
    await asyncio.sleep(0.01)
    second = board.start("t", 1, attempt=2, continued="ab")
    assert board.get("t", 1) is second
    assert await reading == ["abc"]
    assert first.ending == "cut" and second.after(1).text == "b"


async def collect_pieces(generation: Generation) -> list[str]:
    return [piece.text async for piece in generation.follow(0) if piece.text]
