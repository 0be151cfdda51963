"""Chat in a terminal: each line you type is a Berth task, its answer printed as the model writes it.

Needs only the SDK (`pip install berth-sdk`) and a stack to talk to:

    BERTH_API_URL=http://127.0.0.1:8080 BERTH_API_KEY=... python examples/stream_chat.py

Lines come from the terminal, or from the arguments (`python examples/stream_chat.py "length: 300 tokens"`, a line the simulated engine answers at that length).
Text arrives in deltas about twice a second, read from the generation's heartbeats; a delta missed while
the connection was cut is made up from the final answer, so what is printed is always the whole answer.
"""

from __future__ import annotations

import asyncio
import sys

from sdk import Agent, Budget, Client, Ended, TokenDelta

# Room for a long answer in one step: a chat reply is one model call, and 1024 tokens (the default) cut essays short.
chat = Agent("stream-chat-example", "llama-3.2-1b", "Answer the user in a few sentences.", max_tokens_per_step=8192)


async def ask(client: Client, question: str) -> str:
    task = await client.submit(chat, question, budget=Budget(tokens=20_000))
    printed = ""
    async for event in task.stream():
        if isinstance(event, TokenDelta):
            sys.stdout.write(event.text)
            sys.stdout.flush()
            printed += event.text
        elif isinstance(event, Ended):
            answer = event.result or ""
            if answer.startswith(printed):
                sys.stdout.write(answer[len(printed) :])
            else:  # a delta went missing mid-answer: show the answer whole
                sys.stdout.write(f"\n[the whole answer]\n{answer}")
            status = event.status.value if event.error is None else f"{event.status.value}: {event.error}"
            print(f"\n[{task.task_id} {status}, {len(answer)} characters, {len(printed)} as they were written]")
    return printed


async def main(questions: list[str]) -> None:
    async with Client() as client:  # BERTH_API_URL and BERTH_API_KEY from the environment
        await client.register(chat)
        if questions:
            for question in questions:
                await ask(client, question)
            return
        while line := await asyncio.to_thread(_read_line):
            if line.strip():
                await ask(client, line.strip())


def _read_line() -> str:
    sys.stdout.write("> ")
    sys.stdout.flush()
    return sys.stdin.readline()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
