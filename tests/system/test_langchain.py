"""LangChain's ChatOpenAI and LangGraph agents, the real packages of the lock, pointed at tasks of an own-loop agent
on `berth up`: a plain call, tools, structured output, streaming, a prebuilt ReAct agent, and the two examples
(one of them killed mid-tool and run again). Each call must come back as the client expects it and be booked in
the task's ledger once, as the simulated replicas served it once."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent
from pydantic import BaseModel

from sdk import AgentSpec, Budget, SyncClient
from tests.conftest import ROOT
from tests.system.books import assert_calls_booked_once
from tests.system.conftest import Stack
from tests.system.rerun import kill_mid_tool_and_run_again

pytestmark = pytest.mark.system

MODEL = "llama-3.2-1b"
AGENT = "langchain-tests"
LONG_AGENT = "langchain-tests-long"  # room for an answer long enough to stream over several heartbeats
QUESTION = "H100 bandwidth"


class Specs(BaseModel):
    """What the model found about a piece of hardware."""

    subject: str
    bandwidth_tb_s: float


@tool
def lookup(subject: str) -> str:
    """Look a subject up in the team's notes."""
    return f"notes on {subject}"


@tool
def convert(subject: str) -> str:
    """Convert a figure to SI units."""
    return f"{subject} in SI units"


@pytest.fixture(scope="module")
def berth(stack: Stack) -> Iterator[SyncClient]:
    with SyncClient(stack.api, stack.admin_key()) as client:
        client.register(AgentSpec(name=AGENT, model=MODEL, loop="own"))
        client.register(AgentSpec(name=LONG_AGENT, model=MODEL, loop="own", max_tokens_per_step=8192))
        yield client


def task_model(
    stack: Stack, berth: SyncClient, name: str, question: str = QUESTION, agent: str = AGENT
) -> tuple[str, ChatOpenAI]:
    """A fresh task of an own-loop agent, and a ChatOpenAI whose every call is its step. The task's input is its
    conversation's first message: the question the loop asks."""
    task = berth.submit(agent, question, budget=Budget(tokens=20_000), task_id=name)
    llm = ChatOpenAI(
        base_url=f"{stack.api}/v1/tasks/{task.task_id}", api_key=stack.admin_key(), model=MODEL, max_retries=0
    )
    return task.task_id, llm


def finish(stack: Stack, task_id: str, output: str) -> None:
    stack.http.post(f"/v1/tasks/{task_id}/finish", json={"output": output}).raise_for_status()


def test_a_plain_call_answers_and_is_booked_once(stack: Stack, berth: SyncClient) -> None:
    task_id, llm = task_model(stack, berth, "lc-plain")
    reply = llm.invoke(QUESTION)
    assert reply.text.startswith(f"Report on {QUESTION}.") and f"answered by {MODEL}" in reply.text
    assert reply.response_metadata["finish_reason"] == "stop"
    totals = assert_calls_booked_once(stack, task_id, calls=1)
    assert reply.usage_metadata is not None
    assert reply.usage_metadata["input_tokens"] == totals["prompt_tokens"]
    assert reply.usage_metadata["output_tokens"] == totals["completion_tokens"]
    finish(stack, task_id, reply.text)


def test_bind_tools_calls_the_tool_then_answers_from_its_result(stack: Stack, berth: SyncClient) -> None:
    task_id, llm = task_model(stack, berth, "lc-tools")
    model = llm.bind_tools([lookup])
    messages: list = [HumanMessage(QUESTION)]
    first = model.invoke(messages)
    assert [(c["name"], c["args"]) for c in first.tool_calls] == [("lookup", {"subject": QUESTION})]
    assert first.response_metadata["finish_reason"] == "tool_calls"
    messages += [first, ToolMessage(lookup.invoke(first.tool_calls[0]["args"]), tool_call_id=first.tool_calls[0]["id"])]
    answer = model.invoke(messages)
    assert not answer.tool_calls and f"Findings on {QUESTION}: notes on {QUESTION}" in answer.text
    assert_calls_booked_once(stack, task_id, calls=2)
    finish(stack, task_id, answer.text)


@pytest.mark.parametrize(
    ("tool_choice", "called"),
    [
        ("auto", ["lookup"]),
        ("required", ["lookup"]),
        ("any", ["lookup"]),  # LangChain's name for "required"
        ("convert", ["convert"]),  # a tool named: LangChain sends {"type": "function", "function": {"name": ...}}
        ({"type": "function", "function": {"name": "convert"}}, ["convert"]),
        ("none", []),
    ],
    ids=["auto", "required", "any", "named", "named-dict", "none"],
)
def test_bind_tools_honours_each_tool_choice_form(
    stack: Stack, berth: SyncClient, tool_choice: str | dict, called: list[str]
) -> None:
    name = tool_choice if isinstance(tool_choice, str) else "named-dict"
    task_id, llm = task_model(stack, berth, f"lc-choice-{name}")
    reply = llm.bind_tools([lookup, convert], tool_choice=tool_choice).invoke(QUESTION)
    assert [(c["name"], c["args"]) for c in reply.tool_calls] == [(n, {"subject": QUESTION}) for n in called]
    if not called:
        assert reply.text.startswith(f"Report on {QUESTION}.") and "0 tool result(s)" in reply.text
    assert_calls_booked_once(stack, task_id, calls=1)
    finish(stack, task_id, reply.text or "called a tool")


def test_structured_output_as_a_json_schema_is_the_pydantic_object(stack: Stack, berth: SyncClient) -> None:
    task_id, llm = task_model(stack, berth, "lc-structured-schema")
    specs = llm.with_structured_output(Specs, method="json_schema").invoke(QUESTION)
    # The simulated replica fills the schema from its prose answer: strings its first line, numbers their least value.
    assert specs == Specs(subject=f"Report on {QUESTION}.", bandwidth_tb_s=0.0)
    assert_calls_booked_once(stack, task_id, calls=1)
    finish(stack, task_id, specs.model_dump_json())


def test_structured_output_as_a_forced_tool_call_is_the_pydantic_object(stack: Stack, berth: SyncClient) -> None:
    task_id, llm = task_model(stack, berth, "lc-structured-tool")
    specs = llm.with_structured_output(Specs, method="function_calling").invoke(QUESTION)
    # The simulated replica fills a tool's arguments from the subject: strings whole, numbers its first number.
    assert specs == Specs(subject=QUESTION, bandwidth_tb_s=100.0)
    assert_calls_booked_once(stack, task_id, calls=1)
    finish(stack, task_id, specs.model_dump_json())


def test_a_streamed_answer_is_the_answer_and_is_booked_once(stack: Stack, berth: SyncClient) -> None:
    question = f"{QUESTION}\nlength: 600 tokens"
    task_id, llm = task_model(stack, berth, "lc-stream", question)
    chunks = list(llm.stream(question))
    streamed = "".join(chunk.text for chunk in chunks)
    # The same call again is the task's call replayed: the same text, generated and charged once.
    again = llm.invoke(question)
    assert streamed == again.text and streamed.startswith(f"Report on {QUESTION}.") and "Point 1:" in streamed
    assert again.usage_metadata is not None and again.usage_metadata["total_tokens"] == 0
    assert_calls_booked_once(stack, task_id, calls=1)
    finish(stack, task_id, streamed)


def test_a_streamed_answer_arrives_in_deltas_as_it_is_written(stack: Stack, berth: SyncClient) -> None:
    # 6000 tokens take ~4 s on the simulated replica here: the step's text reaches the API in ~8 heartbeats.
    question = f"{QUESTION}\nlength: 6000 tokens"
    task_id, llm = task_model(stack, berth, "lc-stream-deltas", question, agent=LONG_AGENT)
    chunks = [chunk.text for chunk in llm.stream(question)]
    again = llm.invoke(question)
    assert "".join(chunks) == again.text
    # Written over several heartbeats, the answer comes in several deltas, not in one once the step has finished.
    assert len([text for text in chunks if text]) > 1, chunks
    assert_calls_booked_once(stack, task_id, calls=1)
    finish(stack, task_id, again.text)


def test_a_langgraph_react_agent_runs_its_tool_to_an_answer(stack: Stack, berth: SyncClient) -> None:
    subjects = "H100 bandwidth; A100 bandwidth"
    task_id, llm = task_model(stack, berth, "lg-react", subjects)
    graph = create_react_agent(llm, [lookup], prompt="Look each subject up, then write a short report.")
    final = graph.invoke({"messages": [("user", subjects)]})
    messages = final["messages"]
    called = [(c["name"], c["args"]) for m in messages if isinstance(m, AIMessage) for c in m.tool_calls]
    assert called == [("lookup", {"subject": "H100 bandwidth"}), ("lookup", {"subject": "A100 bandwidth"})]
    assert [m.text for m in messages if isinstance(m, ToolMessage)] == [
        "notes on H100 bandwidth",
        "notes on A100 bandwidth",
    ]
    answer = messages[-1]
    assert isinstance(answer, AIMessage) and not answer.tool_calls
    assert "Findings on H100 bandwidth: notes on H100 bandwidth" in answer.text
    assert "Findings on A100 bandwidth: notes on A100 bandwidth" in answer.text
    assert_calls_booked_once(stack, task_id, calls=3)  # two tool rounds and the answer
    finish(stack, task_id, answer.text)


def test_a_langgraph_agent_answers_with_its_structured_response(stack: Stack, berth: SyncClient) -> None:
    task_id, llm = task_model(stack, berth, "lg-structured")
    graph = create_react_agent(llm, [lookup], response_format=Specs)
    final = graph.invoke({"messages": [("user", QUESTION)]})
    # The tool round, the answer, then one more call of the same conversation for the answer's structured form.
    assert [type(m).__name__ for m in final["messages"]] == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]
    assert final["structured_response"] == Specs(subject=f"Report on {QUESTION}.", bandwidth_tb_s=0.0)
    assert_calls_booked_once(stack, task_id, calls=3)
    finish(stack, task_id, final["structured_response"].model_dump_json())


def test_a_langgraph_agent_streams_its_messages(stack: Stack, berth: SyncClient) -> None:
    task_id, llm = task_model(stack, berth, "lg-stream")
    graph = create_react_agent(llm, [lookup])
    written: dict[str, str] = {}
    tool_results = []
    for message, meta in graph.stream({"messages": [("user", QUESTION)]}, stream_mode="messages"):
        if meta["langgraph_node"] == "agent":
            written[message.id] = written.get(message.id, "") + message.text
        else:
            tool_results.append(message.text)
    assert tool_results == [f"notes on {QUESTION}"]
    # Two model turns streamed: the tool call (no text), then the answer.
    streamed = list(written.values())
    assert len(streamed) == 2 and streamed[0] == ""
    # The graph run again is the task's calls replayed: the same answer, generated and charged once.
    again = graph.invoke({"messages": [("user", QUESTION)]})["messages"][-1]
    assert streamed[1] == again.text and f"Findings on {QUESTION}: notes on {QUESTION}" in again.text
    assert_calls_booked_once(stack, task_id, calls=2)
    finish(stack, task_id, again.text)


def run_example(stack: Stack, name: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / name), *args],
        env=stack.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_the_langchain_example_runs_each_use_as_a_task(stack: Stack) -> None:
    ran = run_example(stack, "langchain_on_berth.py", QUESTION)
    out, err = ran.communicate(timeout=300)
    assert ran.returncode == 0, err[-3000:]
    lines = out.splitlines()
    uses = {"plain", "tools", "structured", "structured-by-tool", "streamed"}
    heads = [(n, line.split()) for n, line in enumerate(lines) if line.split()[:1] and line.split()[0] in uses]
    expected = [("plain", 1), ("tools", 2), ("structured", 1), ("structured-by-tool", 1), ("streamed", 1)]
    assert [(use, int(calls)) for _, (use, _, calls) in heads] == expected
    for _, (_, task_id, calls) in heads:
        state = stack.http.get(f"/v1/tasks/{task_id}").json()
        assert state["status"] == "completed" and state["result"] in out
        assert_calls_booked_once(stack, task_id, calls=int(calls))
    structured = {use: Specs.model_validate_json(lines[n + 1]) for n, (use, _, _) in heads if "structured" in use}
    assert structured == {
        "structured": Specs(subject=f"Report on {QUESTION}.", bandwidth_tb_s=0.0),  # the prose's first line
        "structured-by-tool": Specs(subject=QUESTION, bandwidth_tb_s=100.0),  # arguments made from the subject
    }


def test_the_langgraph_example_killed_mid_tool_resumes_with_nothing_done_twice(stack: Stack, tmp_path: Path) -> None:
    journal = tmp_path / "journal.txt"
    journal.touch()
    example = [sys.executable, str(ROOT / "examples" / "langgraph_on_berth.py"), "--task-id", "lg-killed"]
    args = ["--journal", str(journal), "H100 bandwidth; A100 bandwidth"]
    task_id = "default:lg-killed"
    # Each lookup of the first run takes 20 s: long enough to kill it in the middle of the second one, which starts
    # only after the first one's result was kept and the next model call answered.
    out = kill_mid_tool_and_run_again(
        stack, [*example, "--tool-seconds", "20", *args], [*example, *args], journal, task_id
    )
    state = stack.http.get(f"/v1/tasks/{task_id}").json()
    assert state["status"] == "completed" and state["step"] == 3
    assert out.splitlines()[0] == f"{task_id} completed steps=3 tokens={state['spend']['tokens_used']}"
    assert "Findings on A100 bandwidth" in state["result"]
    # Each model call was generated once on the pool and booked once; the re-run's replays cost nothing.
    totals = assert_calls_booked_once(stack, task_id, calls=3)
    assert state["spend"]["tokens_used"] == totals["prompt_tokens"] + totals["completion_tokens"]
