"""The agents the kill-anywhere tests add to the sample ones, served by `berth up`'s own tool worker.

`chaos-asker` asks a human before it researches (ask_human); `chaos-dweller` calls a tool that takes as many
seconds as its subject says, so that a cancel, or a kill of the tool worker, lands while a tool call runs. Their
tools write the sample agents' journal line (`<idempotency key> <tool> pid=<pid> attempt=<n>`).
"""

from __future__ import annotations

import time

from orchestrator.demo.sample_agents import ALL as SAMPLE_AGENTS
from orchestrator.demo.sample_agents import journal, search
from sdk import Agent, tool

# A tool call in flight on a killed tool worker is tried again when its start-to-close timeout passes: kept short,
# so such a call costs the test seconds, and above the longest dwell a test asks for.
DWELL_TIMEOUT_S = 30


@tool(timeout_s=DWELL_TIMEOUT_S)
def dwell(seconds: int) -> str:
    """Work on something for the given number of seconds."""
    journal("dwell")
    time.sleep(min(max(seconds, 0), DWELL_TIMEOUT_S - 5))
    return f"worked for {seconds} s"


asker = Agent(
    "chaos-asker",
    model="llama-3.1-8b",
    instructions="Ask the human what matters before you research, then use search and answer concisely.",
    tools=[search],
    allow_ask_human=True,
    max_steps=20,
    max_tokens_per_step=400,
)

dweller = Agent(
    "chaos-dweller",
    model="llama-3.1-8b",
    instructions="Work on each item with dwell, then report.",
    tools=[dwell],
    max_steps=20,
    max_tokens_per_step=400,
)

CHAOS = [asker, dweller]
ALL = [*SAMPLE_AGENTS, *CHAOS]
