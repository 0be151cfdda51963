"""A LangGraph ReAct agent, its model a Berth task (`pip install berth-sdk langchain-openai langgraph langchain`).

The graph is LangChain's prebuilt agent (`langchain.agents.create_agent`, which LangGraph 1.0 made of its
`create_react_agent`): a model node and a tool node in a loop. The model node's ChatOpenAI points at a task whose
agent is registered with `loop="own"`, so each of its calls is a step of that task: reserved against the task's
budget, placed on the GPU pool where the model's weights are, booked in its ledger.

The tool keeps its results in the task, by the id of the model's call, so killing this script and running it
again with the same `--task-id` replays what the task already answered (no token generated or charged twice,
no finished lookup run again) and goes on:

    BERTH_API_URL=http://127.0.0.1:8080 BERTH_API_KEY=... \\
        python examples/langgraph_on_berth.py --task-id survey-1 "H100 bandwidth; A100 bandwidth"

`--tool-seconds` makes the tool slow enough to kill the script while it runs; `--journal` appends a line to a
file each time the tool starts and ends, to see which calls ran.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path
from typing import Annotated

from langchain.agents import create_agent
from langchain_core.tools import BaseTool, InjectedToolCallId, tool
from langchain_openai import ChatOpenAI
from openai import APIConnectionError, APIStatusError

from sdk import AgentSpec, BerthError, Budget, Client, TaskHandle

AGENT = "langgraph-example"


def durable_lookup(task: TaskHandle, journal: Path | None, tool_seconds: float) -> BaseTool:
    @tool
    async def lookup(subject: str, call_id: Annotated[str, InjectedToolCallId]) -> str:
        """Look a subject up in the team's notes."""
        kept = await task.kept_tool_result(call_id)
        if kept is not None:  # a run before this one finished this call
            return kept
        note(journal, f"start {subject}")
        await asyncio.sleep(tool_seconds)
        result = f"notes on {subject}: the team measured it last quarter"
        await task.keep_tool_result(call_id, result)
        note(journal, f"done {subject}")
        return result

    return lookup


def resumable(error: Exception) -> bool:
    """Berth cut the run off for something a person can fix (the budget is short: raise it; the API is out of reach;
    a server error): the task stays open, to resume with the same --task-id."""
    if isinstance(error, (BerthError, APIConnectionError)):
        return True
    return isinstance(error, APIStatusError) and (error.status_code == 402 or error.status_code >= 500)


def note(journal: Path | None, line: str) -> None:
    if journal is not None:
        with journal.open("a") as out:
            out.write(line + "\n")


async def main(args: argparse.Namespace) -> None:
    async with Client() as client:  # BERTH_API_URL and BERTH_API_KEY from the environment
        await client.register(AgentSpec(name=AGENT, model=args.model, loop="own"))
        task = await client.submit(AGENT, args.input, budget=Budget(tokens=args.tokens), task_id=args.task_id)
        # A retry resends the same call: one the task answered already is answered again from the task, free.
        llm = ChatOpenAI(base_url=task.openai_base_url, api_key=os.environ["BERTH_API_KEY"], model=args.model)
        graph = create_agent(
            llm,
            [durable_lookup(task, args.journal, args.tool_seconds)],
            system_prompt="Look each subject up, then write a short report.",
        )
        try:
            final = await graph.ainvoke({"messages": [("user", args.input)]})
        except Exception as error:
            if not resumable(error):
                await task.finish(error=f"{type(error).__name__}: {error}"[:4000])
            raise
        answer = final["messages"][-1].text
        state = await task.finish(output=answer)
    print(f"{state.task_id} {state.status.value} steps={state.step} tokens={state.spend.tokens_used}")
    print(answer)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("input", nargs="?", default="H100 bandwidth; A100 bandwidth")
    parser.add_argument("--task-id", help="the same id again resumes the task where the last run stopped")
    parser.add_argument("--model", default="llama-3.2-1b", help="a model of the stack's catalogue")
    parser.add_argument("--tokens", type=int, default=20_000, help="the task's token budget")
    parser.add_argument("--tool-seconds", type=float, default=0.0, help="how long each lookup takes")
    parser.add_argument("--journal", type=Path, help="a file the tool appends 'start/done <subject>' lines to")
    asyncio.run(main(parser.parse_args()))
