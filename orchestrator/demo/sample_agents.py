"""Sample agents, written exactly as an author would: only `from sdk import ...`.

`research` looks things up in a small built-in knowledge base and keeps notes;
`coordinator` splits a question between two `research` sub-agents; both are used by the
demo, the README and the system tests. `writer` researches the same way and then writes a
long report (the demo preempts its node mid-report). `ask` puts a question to the real model that runs
on CPU (SmolLM2-135M through llama.cpp), whose answer is the model's own text; `essay` has it write at
length (the system tests take its node away mid-essay). Each tool appends a line to the file named by
BERTH_TOOL_JOURNAL (when set): `<idempotency key> <tool> pid=<process> attempt=<n>`, so tests can prove that no
finished tool call ran twice, and tell a call run again because its tool worker was killed mid-call.
"""

from __future__ import annotations

import os
import re

from sdk import Agent, tool, tool_context

KNOWLEDGE = {
    "h100": "NVIDIA H100 SXM: 80 GB HBM3, 3.35 TB/s memory bandwidth, ~990 TFLOP/s dense BF16.",
    "a100": "NVIDIA A100: 40 or 80 GB HBM2e, up to 2.0 TB/s memory bandwidth, 312 TFLOP/s dense BF16.",
    "l4": "NVIDIA L4: 24 GB GDDR6, 300 GB/s memory bandwidth, 121 TFLOP/s dense BF16; cheap inference card.",
    "kv cache": "KV cache per token = 2 x layers x kv_heads x head_dim x bytes; ~128 KiB/token for an 8B model.",
    "decode": "Decoding is memory-bandwidth bound: tokens/s per stream ≈ bandwidth / model bytes.",
    "spot": "Spot GPUs cost 60-70% less than on-demand and can be reclaimed with ~2 minutes notice.",
    "8b": "An 8B model in fp16 needs ~16 GB for weights; with KV headroom it fits one 24 GB+ GPU.",
    "70b": "A 70B model in fp16 needs ~140 GB for weights: tensor parallel over 2+ 80 GB GPUs.",
}


def journal(tool_name: str) -> None:
    """One line for this run of a tool call, in the BERTH_TOOL_JOURNAL file (when set)."""
    path = os.environ.get("BERTH_TOOL_JOURNAL")
    if path:
        call = tool_context()
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{call.idempotency_key} {tool_name} pid={os.getpid()} attempt={call.attempt}\n")


@tool(timeout_s=20)
def search(query: str) -> str:
    """Search the engineering knowledge base; returns the matching facts."""
    journal("search")
    words = set(re.findall(r"[a-z0-9]+", query.lower()))
    hits = [fact for key, fact in KNOWLEDGE.items() if set(key.split()) & words or key in query.lower()]
    return "\n".join(hits) if hits else f"no facts found for {query!r}"


@tool(timeout_s=20)
def take_note(topic: str) -> str:
    """Record a note on a topic for the final report."""
    journal("take_note")
    return f"noted: {topic.strip()[:120]}"


research = Agent(
    "research",
    model="llama-3.1-8b",
    instructions="You research GPU serving questions. Use search for facts and take_note to record them, "
    "then answer concisely.",
    tools=[search, take_note],
    max_steps=20,
    max_tokens_per_step=400,
)

coordinator = Agent(
    "coordinator",
    model="llama-3.1-8b",
    instructions="You coordinate research: delegate sub-questions to the research agent, then combine the answers.",
    max_steps=10,
    max_tokens_per_step=400,
    allow_spawn=True,
)

writer = Agent(
    "writer",
    model="llama-3.1-8b",
    instructions="You research GPU serving questions with search, then write a thorough report.",
    tools=[search],
    max_steps=20,
    max_tokens_per_step=4096,
)

ask = Agent(
    "ask",
    model="smollm2-135m",
    instructions="Answer the question in one or two sentences.",
    max_steps=2,
    max_tokens_per_step=128,
)

essay = Agent(
    "essay",
    model="smollm2-135m",
    instructions="Write a long, detailed essay on the subject you are given.",
    max_steps=2,
    max_tokens_per_step=1024,
)

ALL = [research, coordinator, writer, ask, essay]
