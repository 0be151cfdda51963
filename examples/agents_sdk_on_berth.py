"""An OpenAI Agents SDK agent, unchanged, run as a Berth task (`pip install "berth-sdk[agents]"`).

The agent's loop stays the Agents SDK's; each of its model calls is a step of a Berth task: reserved against
the task's budget, placed on the GPU pool where the model's weights are, booked in its ledger. Its function
tool keeps its results in the task, so killing this script and running it again with the same `--task-id`
replays what the task already answered (no token generated or charged twice, no tool run twice) and goes on:

    BERTH_API_URL=http://127.0.0.1:8080 BERTH_API_KEY=... \\
        python examples/agents_sdk_on_berth.py --task-id survey-1 "H100 bandwidth; A100 bandwidth"

`--tool-seconds` makes the tool slow enough to kill the script while it runs; `--journal` appends a line to a
file each time the tool starts and ends, to see which calls ran.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from agents import Agent, function_tool

from sdk import Budget, Client
from sdk.openai_agents import run_on_berth


def build_agent(journal: Path | None, tool_seconds: float) -> Agent:
    @function_tool
    async def lookup(subject: str) -> str:
        """Look a subject up in the team's notes."""
        note(journal, f"start {subject}")
        await asyncio.sleep(tool_seconds)
        note(journal, f"done {subject}")
        return f"notes on {subject}: the team measured it last quarter"

    return Agent(name="Surveyor", instructions="Look each subject up, then write a short report.", tools=[lookup])


def note(journal: Path | None, line: str) -> None:
    if journal is not None:
        with journal.open("a") as out:
            out.write(line + "\n")


async def main(args: argparse.Namespace) -> None:
    async with Client() as client:  # BERTH_API_URL and BERTH_API_KEY from the environment
        run = await run_on_berth(
            client,
            build_agent(args.journal, args.tool_seconds),
            args.input,
            model=args.model,
            budget=Budget(tokens=args.tokens),
            task_id=args.task_id,
        )
        state = await run.task.status()
    print(f"{state.task_id} {state.status.value} steps={state.step} tokens={state.spend.tokens_used}")
    print(run.final_output)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("input", nargs="?", default="H100 bandwidth; A100 bandwidth")
    parser.add_argument("--task-id", help="the same id again resumes the task where the last run stopped")
    parser.add_argument("--model", default="llama-3.2-1b", help="a model of the stack's catalogue")
    parser.add_argument("--tokens", type=int, default=20_000, help="the task's token budget")
    parser.add_argument("--tool-seconds", type=float, default=0.0, help="how long each lookup takes")
    parser.add_argument("--journal", type=Path, help="a file the tool appends 'start/done <subject>' lines to")
    asyncio.run(main(parser.parse_args()))
