"""An Agents SDK agent whose tool needs a person's approval, run on Berth from a process of its own (the system
test kills it while it waits). Usage: python -m tests.system.approving_agent TASK_ID JOURNAL "subject"."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from agents import Agent, function_tool

from sdk import Budget, Client
from sdk.openai_agents import run_on_berth


async def main(task_id: str, journal: Path, subject: str) -> None:
    @function_tool(needs_approval=True)
    def transfer(subject: str) -> str:
        """Order the subject's hardware (a person approves each order)."""
        with journal.open("a") as out:
            out.write(f"ordered {subject}\n")
        return f"order placed for {subject}"

    agent = Agent(name="Buyer", instructions="Order each subject, then report.", tools=[transfer])
    async with Client() as client:  # BERTH_API_URL and BERTH_API_KEY from the environment
        with journal.open("a") as out:
            out.write("started\n")
        run = await run_on_berth(
            client, agent, subject, model="llama-3.2-1b", budget=Budget(tokens=20_000), task_id=task_id
        )
    print(run.final_output)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3]))
