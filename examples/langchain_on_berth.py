"""LangChain's ChatOpenAI pointed at a Berth task (`pip install berth-sdk langchain-openai`).

The model calls stay LangChain's; each one is a step of a Berth task whose agent is registered with
`loop="own"`: reserved against the task's budget, placed on the GPU pool where the model's weights are, booked
in its ledger. The API key is the Berth key the script runs with (BERTH_API_KEY).

Each use below is one conversation, so one task each (a task holds one conversation):

- a plain call;
- `bind_tools`: the model asks for a tool, the script runs it, reports its result to the task (so a re-run after
  a crash reads it back instead of running the tool again) and asks again;
- `with_structured_output`, as a JSON schema the model's decoding follows (`method="json_schema"`) or as a
  forced tool call (`method="function_calling"`);
- streaming.

    BERTH_API_URL=http://127.0.0.1:8080 BERTH_API_KEY=... python examples/langchain_on_berth.py "H100 bandwidth"

Each use prints one line, `<use> <task id> <ledger calls>`, then what the model said.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Awaitable, Callable

from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import BaseModel

from sdk import AgentSpec, Budget, Client, TaskHandle

AGENT = "langchain-example"


class Specs(BaseModel):
    """What the model found about a piece of hardware."""

    subject: str
    bandwidth_tb_s: float


@tool
def lookup(subject: str) -> str:
    """Look a subject up in the team's notes."""
    return f"notes on {subject}: the team measured it last quarter"


def chat_model(task: TaskHandle, model: str) -> ChatOpenAI:
    # A retry resends the same call: one the task answered already is answered again from the task, free.
    return ChatOpenAI(base_url=task.openai_base_url, api_key=os.environ["BERTH_API_KEY"], model=model)


async def plain(llm: ChatOpenAI, task: TaskHandle, question: str) -> str:
    return (await llm.ainvoke(question)).text


async def with_tools(llm: ChatOpenAI, task: TaskHandle, question: str) -> str:
    model = llm.bind_tools([lookup])
    messages: list[BaseMessage] = [HumanMessage(question)]
    while (reply := await model.ainvoke(messages)).tool_calls:
        messages.append(reply)
        for call in reply.tool_calls:
            call_id = call["id"] or ""
            result = await task.kept_tool_result(call_id)
            if result is None:
                result = str(await lookup.ainvoke(call["args"]))
                await task.keep_tool_result(call_id, result)
            messages.append(ToolMessage(result, tool_call_id=call_id))
    return reply.text


async def structured(llm: ChatOpenAI, task: TaskHandle, question: str) -> str:
    specs = await llm.with_structured_output(Specs, method="json_schema").ainvoke(question)
    assert isinstance(specs, Specs)
    return specs.model_dump_json()


async def structured_by_tool(llm: ChatOpenAI, task: TaskHandle, question: str) -> str:
    specs = await llm.with_structured_output(Specs, method="function_calling").ainvoke(question)
    assert isinstance(specs, Specs)
    return specs.model_dump_json()


async def streamed(llm: ChatOpenAI, task: TaskHandle, question: str) -> str:
    text = ""
    async for chunk in llm.astream(question):
        text += chunk.text
    return text


USES: dict[str, Callable[[ChatOpenAI, TaskHandle, str], Awaitable[str]]] = {
    "plain": plain,
    "tools": with_tools,
    "structured": structured,
    "structured-by-tool": structured_by_tool,
    "streamed": streamed,
}


async def main(args: argparse.Namespace) -> None:
    async with Client() as client:  # BERTH_API_URL and BERTH_API_KEY from the environment
        await client.register(AgentSpec(name=AGENT, model=args.model, loop="own"))
        for use in args.use or list(USES):
            task = await client.submit(AGENT, args.question, budget=Budget(tokens=args.tokens))
            try:
                answer = await USES[use](chat_model(task, args.model), task, args.question)
            except Exception as error:
                await task.finish(error=f"{type(error).__name__}: {error}"[:4000])
                raise
            await task.finish(output=answer)
            ledger = await task.ledger()
            print(f"{use} {task.task_id} {ledger.totals.calls}")
            print(answer)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("question", nargs="?", default="H100 bandwidth")
    parser.add_argument("--use", action="append", choices=list(USES), help="run only these uses (repeatable)")
    parser.add_argument("--model", default="llama-3.2-1b", help="a model of the stack's catalogue")
    parser.add_argument("--tokens", type=int, default=20_000, help="each task's token budget")
    asyncio.run(main(parser.parse_args()))
