"""A workload of tasks that together use every feature a task can: what the kill-anywhere tests run under kills.

One `Job` per feature: Berth's own loop with tools, sub-agents (spawn_agent), a question to a human answered
through the API, a budget wait and its raise, a cancel during a generation and one during a tool call, a node
preempted with notice under a generation, a task long enough to continue as new, and an own loop driven through
the task's Chat Completions route. `Workload` submits rounds of them (ids of their own), and its driver thread
does what each task waits for from outside (answers, raises, cancels, preempts) at the moment it is due, retrying
through whatever is down; `OwnLoop` is the loop of an own-loop task, run in a thread of its own.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import httpx

from sdk import AgentSpec, Budget, SyncClient, TaskStatus
from tests.system.conftest import Stack

MODEL = "llama-3.1-8b"
OWN_LOOP_AGENT = "chaos-own"
TEN_SUBJECTS = "; ".join(
    [
        "H100 memory bandwidth",
        "A100 memory bandwidth",
        "L4 memory bandwidth",
        "spot preemption",
        "kv cache size for 8b",
        "decode speed for an 8b model",
        "70b tensor parallel",
        "H100 compute",
        "A100 compute",
        "L4 price",
    ]
)
# What an answer a test waits on says, and how much a budget-starved task is given to go on.
HUMAN_ANSWER = "the H100 first"
BUDGET_RAISE = 10_000
# A driver's action that could not be told apart from one not taken (its answer timed out) is taken again after this.
RETRY_ACTION_S = 5.0
# The own loop's tool, as the Chat Completions route offers it to the model.
LOOKUP_TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a subject up.",
        "parameters": {"type": "object", "properties": {"subject": {"type": "string"}}, "required": ["subject"]},
    },
}


@dataclass(frozen=True)
class Job:
    """One task of a round: the feature it uses, how it is submitted, and the status it must end with."""

    feature: str
    agent: str
    input: str
    budget: int
    ends: TaskStatus = TaskStatus.completed
    max_steps: int | None = None


JOBS = {
    job.feature: job
    for job in [
        Job("tools", "research", "; ".join(TEN_SUBJECTS.split("; ")[:6]), 60_000),
        Job(
            "spawn",
            "coordinator",
            "delegate to research: H100 memory bandwidth; A100 memory bandwidth (budget 6000)\n"
            "delegate to research: L4 memory bandwidth; spot preemption (budget 6000)",
            40_000,
        ),
        Job("ask", "chaos-asker", "ask: which GPU matters most?\nH100 memory bandwidth; L4 memory bandwidth", 30_000),
        # 700 tokens pay for a step or two of research: it waits in awaiting_budget until the driver raises it.
        Job("budget", "research", "H100 memory bandwidth; A100 memory bandwidth", 700),
        # ~33 s of writing (4,000 tokens at 120 tokens/s): the driver cancels it as soon as its text shows.
        Job("cancel-generation", "writer", "L4 memory bandwidth\nlength: 4000 tokens", 60_000, TaskStatus.cancelled),
        # Its first tool call dwells 20 s: the driver cancels it once the journal shows the call running.
        Job(
            "cancel-tool",
            "chaos-dweller",
            "20 seconds on the first item; 1 second on the second",
            30_000,
            TaskStatus.cancelled,
        ),
        # ~21 s of writing: the driver preempts the node it writes on (10 s notice) once its text shows.
        Job("preempt", "writer", "A100 memory bandwidth\nlength: 2500 tokens", 60_000),
        # 21 steps: more than the 200 events after which the stack's Temporal suggests continue-as-new.
        Job("long", "research", TEN_SUBJECTS, 80_000, max_steps=40),
        Job("own-loop", OWN_LOOP_AGENT, "H100 memory bandwidth; A100 memory bandwidth; L4 memory bandwidth", 30_000),
        # Tool calls of a few seconds each, for a kill of the tool worker to land in.
        Job("dwell", "chaos-dweller", "3 seconds; 4 seconds; 2 seconds; 5 seconds; 3 seconds", 30_000),
    ]
}


@dataclass
class Tracked:
    """A task of the workload (or a sub-agent of one) and what the driver has done to it."""

    task_id: str
    feature: str
    ends: TaskStatus
    status: str = "queued"
    acted: dict[str, int] = field(default_factory=dict)  # action → times it was answered as taken
    last_try: float = 0.0
    preempted_node: str | None = None

    @property
    def final(self) -> bool:
        return TaskStatus(self.status).is_final


def register_own_loop_agent(stack: Stack) -> None:
    with SyncClient(stack.api, stack.admin_key()) as client:
        client.register(AgentSpec(name=OWN_LOOP_AGENT, model=MODEL, loop="own"))


class Workload:
    """Rounds of jobs on one stack, a driver thread acting on them, and what went wrong in any of its threads."""

    def __init__(self, stack: Stack, prefix: str, features: list[str], journal_path: str) -> None:
        self.stack, self.prefix, self.features, self.journal_path = stack, prefix, features, journal_path
        self.tasks: dict[str, Tracked] = {}
        self.rounds = 0
        self.errors: list[str] = []
        self.loops: list[OwnLoop] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._http = httpx.Client(
            base_url=stack.api, headers={"authorization": f"Bearer {stack.admin_key()}"}, timeout=20
        )
        self._driver = threading.Thread(target=self._drive, name=f"driver-{prefix}", daemon=True)
        # The actions with a deadline (cancel a 20 s tool call while it runs, a generation while it writes, preempt
        # its node while it writes) have a thread of their own: the driver's pass waits on answers and raises that
        # need the orchestrator worker, and with it killed beside two CPU hogs a pass outlasted the moment (a tool
        # call finished uncancelled; a writer finished before its node was preempted).
        self._in_time = threading.Thread(target=self._act_in_time, name=f"in-time-{prefix}", daemon=True)

    # ----- the rounds ---------------------------------------------------------------------------
    def submit_round(self) -> None:
        self.rounds += 1
        with SyncClient(self.stack.api, self.stack.admin_key()) as client:
            for feature in self.features:
                job = JOBS[feature]
                task_id = f"default:{self.prefix}{self.rounds}-{feature}"
                client.submit(job.agent, job.input, budget=Budget(job.budget), task_id=task_id, max_steps=job.max_steps)
                with self._lock:
                    self.tasks[task_id] = Tracked(task_id, feature, job.ends)
                if job.agent == OWN_LOOP_AGENT:
                    loop = OwnLoop(self.stack, task_id, job.input, self.journal_path)
                    self.loops.append(loop)
                    loop.start()
        if not self._driver.is_alive():
            self._driver.start()
            self._in_time.start()

    def snapshot(self) -> list[Tracked]:
        with self._lock:
            return list(self.tasks.values())

    def running(self) -> list[Tracked]:
        return [t for t in self.snapshot() if not t.final]

    def all_final(self) -> bool:
        return not self.running() and all(not loop.is_alive() for loop in self.loops)

    def stop(self) -> None:
        self._stop.set()
        self._driver.join(timeout=30)
        self._in_time.join(timeout=30)
        for loop in self.loops:
            loop.stop.set()
            loop.join(timeout=30)
        self.errors.extend(f"own loop {loop.task_id}: {loop.error}" for loop in self.loops if loop.error)
        self._http.close()

    # ----- the driver ---------------------------------------------------------------------------
    def _drive(self) -> None:
        while not self._stop.is_set():
            for task in self.snapshot():
                if task.final:
                    continue
                try:
                    self._act(task)
                except httpx.HTTPError:
                    pass  # the server or Temporal is down for now: the next pass asks again
                except Exception:  # a fault of the driver itself: reported at the test's end, not swallowed
                    self.errors.append(f"driver on {task.task_id}: {traceback.format_exc()}")
                    return
            self._stop.wait(0.5)

    def _act(self, task: Tracked) -> None:
        state = self._http.get(f"/v1/tasks/{task.task_id}")
        if state.status_code != 200:
            return
        body = state.json()
        task.status = body["status"]
        for child in body.get("children") or []:
            with self._lock:
                self.tasks.setdefault(child, Tracked(child, f"{task.feature}-child", TaskStatus.completed))
        if task.final or time.monotonic() - task.last_try < RETRY_ACTION_S:
            return
        if task.feature == "ask" and task.status == TaskStatus.awaiting_input:
            self._take(task, "answer", "POST", f"/v1/tasks/{task.task_id}/answer", {"text": HUMAN_ANSWER})
        elif task.feature == "budget" and task.status == TaskStatus.awaiting_budget:
            self._take(task, "raise", "POST", f"/v1/tasks/{task.task_id}/raise-budget", {"tokens": BUDGET_RAISE})

    def _act_in_time(self) -> None:
        """The actions with a deadline, each as soon as its moment shows: cancel a tool call while it runs (the
        journal shows it), cancel a generation and preempt its node while it writes. None needs the orchestrator
        worker (a cancel is a signal Temporal takes with it down; a preemption is the store's and the node's), so
        they wait only for the server, never for the driver's pass of answers and raises."""
        with httpx.Client(
            base_url=self.stack.api, headers={"authorization": f"Bearer {self.stack.admin_key()}"}, timeout=20
        ) as http:
            while not self._stop.is_set():
                for task in self.snapshot():
                    if task.final or time.monotonic() - task.last_try < RETRY_ACTION_S:
                        continue
                    try:
                        self._act_now(task, http)
                    except httpx.HTTPError:
                        pass  # the server is down for now: asked again after RETRY_ACTION_S
                self._stop.wait(0.5)

    def _act_now(self, task: Tracked, http: httpx.Client) -> None:
        path = f"/v1/tasks/{task.task_id}/cancel"
        if task.feature == "cancel-tool" and "cancel" not in task.acted and self._dwelling(task):
            self._take(task, "cancel", "POST", path, {"reason": "chaos: mid-tool"}, http)
        elif task.feature == "cancel-generation" and "cancel" not in task.acted and self._writing(task, http):
            self._take(task, "cancel", "POST", path, {"reason": "chaos: mid-generation"}, http)
        elif task.feature == "preempt" and "preempt" not in task.acted and self._writing(task, http):
            node = self._lease_node(task.task_id)
            if node is not None:
                task.preempted_node = node
                self._take(task, "preempt", "POST", f"/v1/nodes/{node}/preempt", {"notice_s": 10}, http)

    def _take(
        self, task: Tracked, action: str, method: str, path: str, body: dict[str, Any], http: httpx.Client | None = None
    ) -> None:
        task.last_try = time.monotonic()
        answer = (http or self._http).request(method, path, json=body)
        if answer.status_code in (200, 202):
            task.acted[action] = task.acted.get(action, 0) + 1

    def _writing(self, task: Tracked, http: httpx.Client) -> bool:
        """Its generation has written text (a report: its searches are done)."""
        answer = http.get(f"/v1/tasks/{task.task_id}/writing")
        return answer.status_code == 200 and len(answer.json()["text"]) > 0

    def _dwelling(self, task: Tracked) -> bool:
        """Its dwell tool call has started (the journal shows it; it runs 20 s)."""
        try:
            with open(self.journal_path, encoding="utf-8") as journal:
                return any(line.startswith(f"{task.task_id}/") and " dwell " in line for line in journal)
        except FileNotFoundError:
            return False

    def _lease_node(self, task_id: str) -> str | None:
        """The node of the lease the task's step holds now (the pool writes every lease through to the store)."""
        try:
            with sqlite3.connect(f"file:{self.stack.data_dir / 'berth.db'}?mode=ro", uri=True, timeout=5) as db:
                row = db.execute("SELECT node_id FROM leases WHERE task_id = ?", (task_id,)).fetchone()
        except sqlite3.Error:
            return None
        return row[0] if row else None


class OwnLoop(threading.Thread):
    """An own loop through `POST /v1/tasks/{id}/chat/completions`, written as an author would write it with a plain
    HTTP client: ask, run the tools the reply calls (reading Berth's record of each call first, keeping its result
    after), ask again, finish with the answer. A call that fails because something is down is made again: the
    task answers a call it answered before from its record, without generating it twice."""

    def __init__(self, stack: Stack, task_id: str, text: str, journal_path: str) -> None:
        super().__init__(name=f"own-loop-{task_id}", daemon=True)
        self.task_id, self.text, self.journal_path = task_id, text, journal_path
        self.http = httpx.Client(base_url=stack.api, headers={"authorization": f"Bearer {stack.admin_key()}"})
        self.stop = threading.Event()
        self.error: str | None = None
        self.output: str | None = None

    def run(self) -> None:
        try:
            self.output = self._loop()
        except Exception:
            self.error = traceback.format_exc()
        finally:
            self.http.close()

    def _loop(self) -> str:
        base = f"/v1/tasks/{self.task_id}"
        messages: list[dict[str, Any]] = [{"role": "user", "content": self.text}]
        while True:
            reply = self._call("POST", f"{base}/chat/completions", {"messages": messages, "tools": [LOOKUP_TOOL]})
            message = reply.json()["choices"][0]["message"]
            calls = message.get("tool_calls") or []
            messages.append({"role": "assistant", "content": message.get("content"), "tool_calls": calls or None})
            if not calls:
                self._call("POST", f"{base}/finish", {"output": message["content"]}, ended_ok=True)
                return str(message["content"])
            for call in calls:
                kept = self._call("GET", f"{base}/tool-results/{call['id']}", missing_ok=True)
                if kept.status_code == 200:
                    content = kept.json()["content"]
                else:
                    content = self._lookup(call)
                    self._call("PUT", f"{base}/tool-results/{call['id']}", {"content": content})
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})

    def _lookup(self, call: dict[str, Any]) -> str:
        with open(self.journal_path, "a", encoding="utf-8") as journal:
            journal.write(f"{self.task_id}/{call['id']} lookup pid=own-loop attempt=1\n")
        return f"notes on {call['function']['arguments']}"

    def _call(
        self, method: str, path: str, body: dict | None = None, missing_ok: bool = False, ended_ok: bool = False
    ) -> httpx.Response:
        """The answer to a request, made again while what serves it is down (connection refused, a timeout, 5xx)."""
        while not self.stop.is_set():
            try:
                answer = self.http.request(method, path, json=body, timeout=120)
            except httpx.TransportError:
                self.stop.wait(1)
                continue
            if answer.status_code >= 500:
                self.stop.wait(1)
                continue
            if answer.status_code < 300 or (missing_ok and answer.status_code == 404):
                return answer
            if ended_ok and answer.status_code == 409 and self._completed():
                return answer  # the finish landed before an answer that was lost
            raise AssertionError(f"{method} {path}: {answer.status_code} {answer.text[:500]}")
        raise AssertionError(f"{method} {path}: stopped before it was answered")

    def _completed(self) -> bool:
        return self.http.get(f"/v1/tasks/{self.task_id}").json()["status"] == TaskStatus.completed
