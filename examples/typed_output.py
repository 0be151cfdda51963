"""A typed answer from Berth with nothing but the SDK installed (`pip install berth-sdk`).

The script serves its agent's tool in the background and submits a task at once (the submit waits for
the agent's registration); the answer comes back as a validated `Finding`. Run it against any stack:

    BERTH_API_URL=http://127.0.0.1:8080 BERTH_API_KEY=... TEMPORAL_ADDRESS=127.0.0.1:7233 \
        python examples/typed_output.py "H100 memory bandwidth"
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid

from pydantic import BaseModel, Field

from sdk import Agent, Budget, Client, ModelSettings, serve, tool


class Finding(BaseModel):
    summary: str = Field(max_length=200, description="the answer in one sentence")
    confidence: int = Field(ge=1, le=5)
    sources: list[str] = Field(min_length=1)


@tool
def search(query: str) -> str:
    """Search the team's notes."""
    return f"notes on {query}: the H100 SXM reads HBM3 at 3.35 TB/s"


researcher = Agent(
    f"typed-example-{uuid.uuid4().hex[:6]}",
    "llama-3.2-1b",
    "Search, then answer.",
    [search],
    output_type=Finding,
    settings=ModelSettings(temperature=0.2, seed=7),
)


async def main(question: str) -> None:
    worker = asyncio.create_task(serve(researcher))  # BERTH_API_URL/KEY, TEMPORAL_ADDRESS from the environment
    try:
        async with Client() as client:
            task = await client.submit(researcher, question, budget=Budget(tokens=20_000))
            finding = await task.result(timeout=300)
    finally:
        worker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await worker
    print(f"{task.task_id} {type(finding).__name__} {finding.model_dump_json()}")


if __name__ == "__main__":
    asyncio.run(main(" ".join(sys.argv[1:]) or "H100 memory bandwidth"))
