"""What a streamed model call costs this process's CPU: the plain OpenAI-compatible client against litellm.

Both clients (`activities.step.model_stream.open_stream` on one route with `openai_compatible` set and on the same
route without it) read the same step-sized reply from a simulated engine at latency 0, run as its own process:
the research sample agent's answer step (its instructions and two tool schemas, the four tool calls and results
before it) with a 64-token answer, read to its usage and closed, as the LLM step reads it. Calls go in rounds of
ROUND_CALLS per client, the clients taking turns to go first, so a slower moment of a shared machine falls on
both. Reported per call, in the median round: CPU (`time.process_time` of this process, its threads included;
the engine's work is not part of it) and wall time, and the ratio plain ÷ litellm, for calls one after another
and for `--concurrent` calls at once (a node streams many steps together). A long variant (LONG_ANSWER_TOKENS)
separates each client's cost per call from its cost per chunk, and streams as many chunks as a 64-token answer
from vLLM, which sends one token a chunk (the simulated engine sends 4).

    python -m benchmarks.model_client [--rounds 10] [--concurrent 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx  # noqa: E402

from activities.step.model_stream import ModelCallError, StreamRequest, open_stream  # noqa: E402
from activities.step.tokens import count_prompt_tokens, sendable_tools  # noqa: E402
from orchestrator.demo.sample_agents import research  # noqa: E402
from sdk.wire.step_call import ModelRoute  # noqa: E402
from sdk.wire.streamed_reply import StreamDelta  # noqa: E402

from ._results import write_results  # noqa: E402
from .step_overhead import _free_port, _wait  # noqa: E402

MODEL = "llama-3.1-8b"
# Two subjects × the agent's two tools: four tool steps, then the answer; the `length:` line makes the simulated
# answer ~420 tokens, so that both variants are cut at their max_tokens.
TASK_INPUT = "h100; a100\nlength: 400 tokens"
ANSWER_TOKENS = 64
# At the simulated engine's 4 tokens a chunk, 256 tokens are 64 chunks and the role's, the finish's and the usage's:
# as many as a 64-token answer from vLLM, which streams one token a chunk.
LONG_ANSWER_TOKENS = 256
ROUND_CALLS = 30
WARM_UP_CALLS = 20
CLIENTS = ("plain", "litellm")


@dataclass
class Tally:
    """One client's calls of one variant: CPU and wall seconds per round, the deltas of its last reply, and the
    calls that failed (counted, not retried: their CPU was spent all the same)."""

    calls_per_round: int
    cpu_s: list[float] = field(default_factory=list)
    wall_s: list[float] = field(default_factory=list)
    deltas: int = 0
    failures: list[str] = field(default_factory=list)

    def figures(self) -> dict[str, Any]:
        """Per call, in the median round: a burst of another process's work on a shared machine moves one round."""
        cpu_ms = [1000 * s / self.calls_per_round for s in self.cpu_s]
        wall_ms = [1000 * s / self.calls_per_round for s in self.wall_s]
        return {
            "calls": self.calls_per_round * len(self.cpu_s),
            "cpu_ms_per_call": round(statistics.median(cpu_ms), 3),
            "cpu_ms_per_call_round_range": [round(min(cpu_ms), 3), round(max(cpu_ms), 3)],
            "wall_ms_per_call": round(statistics.median(wall_ms), 3),
            "deltas_per_reply": self.deltas,
            "failed_calls": len(self.failures),
            "first_failure": self.failures[0] if self.failures else None,
        }


async def _step_request(base_url: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The research agent's answer step, played as a task plays it: its tool calls answered by its own tools."""
    spec = research.spec()
    tools = sendable_tools([t.to_openai() for t in spec.tools])
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": spec.instructions},
        {"role": "user", "content": TASK_INPUT},
    ]
    async with httpx.AsyncClient(timeout=30) as http:
        for _ in range(10):
            reply = (
                await http.post(
                    f"{base_url}/chat/completions",
                    json={"model": MODEL, "messages": messages, "tools": tools, "max_tokens": 400},
                )
            ).json()
            message = reply["choices"][0]["message"]
            if not message.get("tool_calls"):
                return messages, tools
            messages.append(message)
            for call in message["tool_calls"]:
                result = research.tools[call["function"]["name"]](**json.loads(call["function"]["arguments"]))
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": str(result)})
    raise RuntimeError("the simulated agent never reached its answer")


async def _call(route: ModelRoute, request: StreamRequest) -> list[StreamDelta]:
    stream = await open_stream(route, request)
    try:
        return [delta async for delta in stream]
    finally:
        await stream.aclose()


async def _counted_call(route: ModelRoute, request: StreamRequest, tally: Tally) -> list[StreamDelta] | None:
    try:
        return await _call(route, request)
    except ModelCallError as exc:
        tally.failures.append(str(exc)[:300])
        return None


async def _round(route: ModelRoute, request: StreamRequest, calls: int, concurrent: bool, tally: Tally) -> None:
    """`calls` calls into `tally`: one after another, or all at once (as many tasks)."""
    cpu, wall = time.process_time(), time.perf_counter()
    if concurrent:
        answered = await asyncio.gather(*(_counted_call(route, request, tally) for _ in range(calls)))
    else:
        answered = [await _counted_call(route, request, tally) for _ in range(calls)]
    tally.cpu_s.append(time.process_time() - cpu)
    tally.wall_s.append(time.perf_counter() - wall)
    replies = [reply for reply in answered if reply is not None]
    if any(reply[-1].usage is None or reply[-1].usage[1] != request.max_tokens for reply in replies):
        raise RuntimeError(f"{route.served_by}: a reply ended without its {request.max_tokens} tokens' usage")
    tally.deltas = len(replies[-1]) if replies else tally.deltas


async def _variant(
    routes: dict[str, ModelRoute], request: StreamRequest, rounds: int, round_calls: int, concurrent: bool = False
) -> dict[str, Tally]:
    """`rounds` rounds of `round_calls` calls for each client, the clients taking turns to go first."""
    tallies = {name: Tally(round_calls) for name in CLIENTS}
    for n in range(rounds):
        for name in CLIENTS if n % 2 == 0 else CLIENTS[::-1]:
            await _round(routes[name], request, round_calls, concurrent, tallies[name])
    return tallies


def _compared(tallies: dict[str, Tally]) -> dict[str, Any]:
    plain, through_litellm = tallies["plain"].figures(), tallies["litellm"].figures()
    return {
        "plain": plain,
        "litellm": through_litellm,
        "cpu_ratio_plain_over_litellm": round(plain["cpu_ms_per_call"] / through_litellm["cpu_ms_per_call"], 3),
        "wall_ratio_plain_over_litellm": round(plain["wall_ms_per_call"] / through_litellm["wall_ms_per_call"], 3),
    }


def _per_chunk(short: dict[str, Tally], long: dict[str, Tally]) -> dict[str, Any]:
    """Each client's CPU as a cost per call plus a cost per streamed chunk: a line through the two variants."""
    out: dict[str, Any] = {}
    for name in CLIENTS:
        a, b = short[name].figures(), long[name].figures()
        chunk_ms = (b["cpu_ms_per_call"] - a["cpu_ms_per_call"]) / (b["deltas_per_reply"] - a["deltas_per_reply"])
        call_ms = a["cpu_ms_per_call"] - chunk_ms * a["deltas_per_reply"]
        out[name] = {"cpu_us_per_chunk": round(1000 * chunk_ms, 1), "cpu_ms_per_call_besides_chunks": round(call_ms, 3)}
    return out


async def main(rounds: int, concurrent: int) -> dict[str, Any]:
    load_at_start = round(os.getloadavg()[0], 2)  # a shared CPU's other work shows in the wall times
    port = _free_port()
    engine = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.engines.simulated", "--port", str(port), "--latency-scale", "0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        base_url = f"http://127.0.0.1:{port}/v1"
        await _wait(base_url.removesuffix("/v1") + "/health")
        messages, tools = await _step_request(base_url)
        plain = ModelRoute(
            name=MODEL,
            litellm_model=f"hosted_vllm/{MODEL}",
            api_base=base_url,
            api_key="berth-bench",
            usd_per_1m_prompt=None,
            usd_per_1m_completion=None,
            served_by="simulated engine",
            openai_compatible=True,
        )
        routes = {"plain": plain, "litellm": replace(plain, openai_compatible=False)}
        headers = {"X-Berth-Task": "bench-model-client"}
        request = StreamRequest(messages, tools, ANSWER_TOKENS, headers, continue_final_message=False)
        long_request = replace(request, max_tokens=LONG_ANSWER_TOKENS)
        for name in CLIENTS:  # imports, litellm's first-call set-up, the first connection: not measured
            for _ in range(WARM_UP_CALLS):
                await _call(routes[name], request)
        one_by_one = await _variant(routes, request, rounds, ROUND_CALLS)
        together = await _variant(routes, request, rounds, concurrent, concurrent=True)
        long = await _variant(routes, long_request, max(2, rounds // 2), ROUND_CALLS)
    finally:
        engine.terminate()
        engine.wait(10)
    return {
        "engine": "orchestrator.engines.simulated at latency 0, its own process (4 tokens a chunk)",
        "request": {
            "agent": "research (orchestrator/demo/sample_agents.py)",
            "messages": len(messages),
            "tools": len(tools),
            "prompt_tokens": count_prompt_tokens(messages, tools),
            "answer_tokens": ANSWER_TOKENS,
        },
        "measured": "this process's CPU (time.process_time) and wall time per call, open to usage and aclose",
        "one_after_another": _compared(one_by_one),
        "concurrent": {"at_once": concurrent, **_compared(together)},
        "long_answer": {"answer_tokens": LONG_ANSWER_TOKENS, **_compared(long)},
        "per_chunk": _per_chunk(one_by_one, long),
        "load_average_1m_at_start": load_at_start,
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
    }


def _summary(figures: dict[str, Any]) -> None:
    for variant in ("one_after_another", "concurrent", "long_answer"):
        f = figures[variant]
        print(
            f"{variant:>17}: CPU ms/call plain {f['plain']['cpu_ms_per_call']:7.3f}, litellm "
            f"{f['litellm']['cpu_ms_per_call']:7.3f} (ratio {f['cpu_ratio_plain_over_litellm']}); wall ms/call "
            f"{f['plain']['wall_ms_per_call']:7.3f} / {f['litellm']['wall_ms_per_call']:7.3f} "
            f"(ratio {f['wall_ratio_plain_over_litellm']})"
        )
        for name in CLIENTS:
            if f[name]["failed_calls"]:
                print(f"{'':>19}{name}: {f[name]['failed_calls']} call(s) failed, first: {f[name]['first_failure']}")
    plain, through_litellm = figures["per_chunk"]["plain"], figures["per_chunk"]["litellm"]
    print(
        f"CPU per chunk: plain {plain['cpu_us_per_chunk']} µs, litellm {through_litellm['cpu_us_per_chunk']} µs; "
        f"per call besides: {plain['cpu_ms_per_call_besides_chunks']} ms, "
        f"{through_litellm['cpu_ms_per_call_besides_chunks']} ms"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m benchmarks.model_client", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rounds",
        type=int,
        default=10,
        help=f"rounds per client and variant (the long one: half as many); {ROUND_CALLS} calls a round",
    )
    parser.add_argument("--concurrent", type=int, default=50, help="calls at once, a round of the concurrent variant")
    args = parser.parse_args()
    results = asyncio.run(main(args.rounds, args.concurrent))
    path = write_results("model_client", results)
    _summary(results)
    print(f"written to {path}")
