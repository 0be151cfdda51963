"""A hand-written agent loop around the `openai` client, its model a Berth task: what test_openai_client kills
mid-tool and runs again. The tool keeps its results in the task by the model's call id, so the run again replays
the calls the task answered and skips the lookups that finished.

    python -m tests.system.openai_loop --task-id T --journal J --tool-seconds S "H100 bandwidth; A100 bandwidth"
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from openai import OpenAI

from sdk import AgentSpec, Budget, SyncClient

AGENT = "openai-loop"
LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a subject up in the team's notes.",
        "parameters": {"type": "object", "properties": {"subject": {"type": "string"}}, "required": ["subject"]},
    },
}


def main(args: argparse.Namespace) -> None:
    with SyncClient() as berth:  # BERTH_API_URL and BERTH_API_KEY from the environment
        berth.register(AgentSpec(name=AGENT, model=args.model, loop="own"))
        task = berth.submit(AGENT, args.input, budget=Budget(tokens=20_000), task_id=args.task_id)
        openai = OpenAI(base_url=task.openai_base_url, api_key=os.environ["BERTH_API_KEY"])
        messages: list = [{"role": "user", "content": args.input}]
        while True:
            message = (
                openai.chat.completions.create(model=args.model, messages=messages, tools=[LOOKUP]).choices[0].message
            )
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                break
            for call in message.tool_calls:
                result = task.kept_tool_result(call.id)
                if result is None:
                    result = lookup(call.function.arguments, args.journal, args.tool_seconds)
                    task.keep_tool_result(call.id, result)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        state = task.finish(output=message.content or "")
    print(f"{state.task_id} {state.status.value} steps={state.step} tokens={state.spend.tokens_used}")


def lookup(arguments: str, journal: Path, seconds: float) -> str:
    subject = json.loads(arguments)["subject"]
    with journal.open("a") as out:
        out.write(f"start {subject}\n")
    time.sleep(seconds)
    with journal.open("a") as out:
        out.write(f"done {subject}\n")
    return f"notes on {subject}"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("input")
    parser.add_argument("--task-id", required=True)
    parser.add_argument("--model", default="llama-3.2-1b")
    parser.add_argument("--journal", type=Path, required=True)
    parser.add_argument("--tool-seconds", type=float, default=0.0)
    main(parser.parse_args())
