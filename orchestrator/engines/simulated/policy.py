"""What the simulated model says: a pure, deterministic reply that lets agents do real work.

An agent run against the simulator must go through the same motions as one run against
a real model (call tools, read their results, spawn sub-agents, ask a human, answer), and
a step replayed after a preemption must produce the very same reply, or a resumed task
would diverge from the one that was interrupted. So the reply is a function of the
conversation alone: no randomness, no clock, no state between requests.

The reply follows a plan read from the task input (the first user message):
directives first (`delegate to <agent>: <subtask>`, `ask: <question>`), then, for each
subject of the input, one call per offered tool. A turn emits the next planned call that
has no result yet; when none is left, it writes a final answer from the results, short
unless a `length: <n> tokens` line asks for a long one (what preemption tests cut into).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, TypeGuard

SPAWN_AGENT = "spawn_agent"
ASK_HUMAN = "ask_human"
BUILTIN_TOOLS = (SPAWN_AGENT, ASK_HUMAN)
MAX_SUBJECTS = 1000
SUBJECT_CHARS = 200
QUOTE_CHARS = 80
# The answer stops adding findings past this many characters: with ~4-5 characters per
# token it stays within roughly 200 tokens however many subjects the input lists.
ANSWER_CHARS = 640
# A `length:` answer grows by paragraphs to about this many characters per token asked for.
CHARS_PER_TOKEN = 4
MAX_ANSWER_TOKENS = 32_000

_DELEGATE = re.compile(r"^delegate to\s+([^:]+?)\s*:\s*(.+?)(?:\s*\(budget\s+(\d+)\))?\s*$", re.IGNORECASE)
_ASK = re.compile(r"^ask\s*:\s*(.+?)\s*$", re.IGNORECASE)
_LENGTH = re.compile(r"^length\s*:\s*(\d+)\s*tokens?\s*$", re.IGNORECASE)
_PARALLEL = re.compile(r"\bparallel\b", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


@dataclass(frozen=True)
class PlannedCall:
    """One tool call as the model emits it; `arguments` is JSON text, `id` depends only on the plan."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Reply:
    """Either a text answer (`content`) or tool calls, never both."""

    content: str | None = None
    tool_calls: tuple[PlannedCall, ...] = ()


@dataclass(frozen=True)
class TaskInput:
    """The first user message, read as subjects to work through and directives to act on."""

    subjects: tuple[str, ...]
    directives: tuple[tuple[str, dict[str, Any]], ...]  # (built-in tool, its arguments), in input order
    parallel: bool
    answer_tokens: int = 0  # a `length:` line: the answer runs to about this many tokens


@dataclass
class _Step:
    group: int  # calls of one group go out together in parallel mode
    name: str
    args: dict[str, Any]
    key: str  # whose result this is, for the answer: "s:<subject>", "a:<agent>" or "h" (the human)
    results: list[str] = field(default_factory=list)
    canonical: str = ""  # _canonical(args), what a result's call is matched on

    def __post_init__(self) -> None:
        self.canonical = self.canonical or _canonical(self.args)


def reply(model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> Reply:
    """The model's next message for this conversation and these offered tools."""
    task, offered, steps = _planned(_first_user_text(messages), tools)
    results, last_tool_text = _results(messages)
    pending = _attach_results(steps, results)
    if pending:
        batch = [s for s in pending if s.group == pending[0].group] if task.parallel else pending[:1]
        return Reply(tool_calls=tuple(_call(steps.index(s), s) for s in batch))
    return Reply(content=_answer(model, task, steps, offered, last_tool_text))


def parse_input(text: str) -> TaskInput:
    """Split the input into subjects (lines or `;` items) and directive lines.

    A directive line is never a subject, even when its tool is not offered: it is an
    instruction to the agent, not material to work on. Items of a directive stay whole, so
    `delegate to x: a; b` hands the sub-agent the list `a; b` to split itself.
    """
    items: list[str] = []
    directives: list[tuple[str, dict[str, Any]]] = []
    plain: list[str] = []
    answer_tokens = 0
    for raw in text.splitlines():
        line = _strip_bullet(raw.strip())
        if not line:
            continue
        if m := _LENGTH.match(line):
            answer_tokens = min(int(m.group(1)), MAX_ANSWER_TOKENS)
        elif m := _DELEGATE.match(line):
            args: dict[str, Any] = {"agent": m.group(1).strip(), "input": m.group(2).strip()}
            if m.group(3):
                args["tokens"] = int(m.group(3))
            directives.append((SPAWN_AGENT, args))
        elif m := _ASK.match(line):
            directives.append((ASK_HUMAN, {"question": m.group(1)}))
        else:
            plain.append(line)
            items.extend(_strip_bullet(part.strip()) for part in line.split(";"))
    subjects = tuple(_squash(s)[:SUBJECT_CHARS].rstrip() for s in items if s.strip())[:MAX_SUBJECTS]
    return TaskInput(subjects, tuple(directives), bool(_PARALLEL.search("\n".join(plain))), answer_tokens)


def fill_arguments(parameters: dict[str, Any] | None, subject: str) -> dict[str, Any]:
    """Arguments for a tool from its JSON schema, made from one subject.

    Required properties are always filled; optional ones only when the schema lists no
    `required` at all (then every property is the tool's real input). What cannot be
    filled is left out: Berth reports bad arguments back to the model as a tool error,
    which is a path agents must survive anyway.
    """
    properties = (parameters or {}).get("properties")
    if not isinstance(properties, dict):
        return {}
    required = (parameters or {}).get("required")
    names = [n for n in properties if n in required] if isinstance(required, list) else list(properties)
    out: dict[str, Any] = {}
    for name in names:
        value = _value(name, properties[name], subject, depth=0)
        if value is not _SKIP:
            out[name] = value
    return out


_SKIP = object()


def _value(name: str, schema: Any, subject: str, depth: int) -> Any:
    if not isinstance(schema, dict) or depth > 5:
        return _SKIP
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        for option in schema.get(key) or []:
            if isinstance(option, dict) and option.get("type") != "null":
                value = _value(name, option, subject, depth + 1)
                if value is not _SKIP:
                    return value
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind is None and isinstance(schema.get("properties"), dict):
        kind = "object"
    if kind == "string":
        return _string(name, schema, subject)
    if kind in ("integer", "number"):
        return _number(kind, schema, subject)
    if kind == "boolean":
        return True
    if kind == "array":
        item = _value(name, schema.get("items", {"type": "string"}), subject, depth + 1)
        return [subject] if item is _SKIP else [item]
    if kind == "object":
        return fill_arguments(schema, subject)
    return _SKIP


def _string(name: str, schema: dict[str, Any], subject: str) -> str:
    key, fmt, slug = name.lower(), str(schema.get("format", "")), _slug(subject)
    if fmt in ("uri", "url", "iri") or any(w in key for w in ("url", "link", "uri", "href")):
        value = f"https://example.org/{slug}"
    elif fmt == "email" or "email" in key:
        value = f"{slug}@example.org"
    elif fmt == "date":
        value = "2024-01-01"
    elif fmt == "date-time":
        value = "2024-01-01T00:00:00Z"
    elif any(w in key for w in ("path", "file", "dir")):
        value = f"{slug}.txt"
    else:
        value = subject
    limit = schema.get("maxLength")
    return value[:limit] if isinstance(limit, int) and limit >= 0 else value


def _number(kind: str, schema: dict[str, Any], subject: str) -> int | float:
    found = _NUMBER.search(subject)
    value: float = float(found.group()) if found else float(len(subject))
    step = 1 if kind == "integer" else 0.5
    # A draft-4 schema's exclusiveMinimum is a boolean, not a bound: _is_number skips it.
    for bound, gap in [(schema.get("minimum"), 0.0), (schema.get("exclusiveMinimum"), step)]:
        if _is_number(bound) and value < bound + gap:
            value = bound + gap
    for bound, gap in [(schema.get("maximum"), 0.0), (schema.get("exclusiveMaximum"), step)]:
        if _is_number(bound) and value > bound - gap:
            value = bound - gap
    return int(value) if kind == "integer" else value


def _is_number(value: object) -> TypeGuard[int | float]:
    """A JSON number: bool is an int to Python, not to JSON Schema."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _planned(text: str, tools: list[dict[str, Any]] | None) -> tuple[TaskInput, dict[str, dict[str, Any]], list[_Step]]:
    """The task, the offered tools and a fresh plan (steps without results) for this input.

    Every turn of a task re-reads the same input and tools, so the plan is made once and
    copied: a 100-step task otherwise re-plans all its steps on each of its 100 requests.
    The cache key is the input and the tools as sent (order kept: it shapes the arguments).
    """
    try:
        tools_key = json.dumps(tools, ensure_ascii=False)
        cacheable = json.loads(tools_key) == tools  # no tuples or other types that JSON would blur
    except (TypeError, ValueError):
        cacheable = False
    if not cacheable:  # a caller in-process with values that are not plain JSON: plan without the cache
        task, offered = parse_input(text), _offered(tools)
        return task, offered, _plan(task, offered)
    task, offered, template = _cached_plan(text, tools_key)
    return task, offered, [_Step(s.group, s.name, s.args, s.key, canonical=s.canonical) for s in template]


@functools.lru_cache(maxsize=256)
def _cached_plan(text: str, tools_key: str) -> tuple[TaskInput, dict[str, dict[str, Any]], tuple[_Step, ...]]:
    task = parse_input(text)
    offered = _offered(json.loads(tools_key))
    return task, offered, tuple(_plan(task, offered))


def _plan(task: TaskInput, offered: dict[str, dict[str, Any]]) -> list[_Step]:
    steps = [
        _Step(0, name, args, f"a:{args['agent']}" if name == SPAWN_AGENT else "h")
        for name, args in task.directives
        if name in offered
    ]
    own = [name for name in offered if name not in BUILTIN_TOOLS]
    for number, subject in enumerate(task.subjects, start=1):
        steps.extend(_Step(number, name, fill_arguments(offered[name], subject), f"s:{subject}") for name in own)
    return steps


def _results(messages: list[dict[str, Any]]) -> tuple[dict[tuple[str, str], list[str]], str | None]:
    """Tool results keyed by (tool name, canonical arguments) of the call they answer, and the last one."""
    calls: dict[str, tuple[str, str]] = {}
    results: dict[tuple[str, str], list[str]] = {}
    last: str | None = None
    for message in messages:
        if message.get("role") == "assistant":
            for call in message.get("tool_calls") or []:
                fn = call.get("function", call) if isinstance(call, dict) else None
                if isinstance(fn, dict) and isinstance(call.get("id"), str) and isinstance(fn.get("name"), str):
                    calls[call["id"]] = (fn["name"], _canonical(fn.get("arguments")))
        elif message.get("role") == "tool":
            last = _text(message.get("content"))
            key = calls.get(str(message.get("tool_call_id")))
            if key is not None:
                results.setdefault(key, []).append(last)
    return results, last


def _attach_results(steps: list[_Step], results: dict[tuple[str, str], list[str]]) -> list[_Step]:
    """Give each step its result (identical calls consume results in turn); return those still pending."""
    available = {key: list(texts) for key, texts in results.items()}
    pending = []
    for step in steps:
        texts = available.get((step.name, step.canonical))
        if texts:
            step.results.append(texts.pop(0))
        else:
            pending.append(step)
    return pending


def _call(index: int, step: _Step) -> PlannedCall:
    arguments = json.dumps(step.args, ensure_ascii=False)
    digest = hashlib.sha256(f"{index}|{step.name}|{arguments}".encode()).hexdigest()[:24]
    return PlannedCall(id=f"call_{digest}", name=step.name, arguments=arguments)


def _answer(model: str, task: TaskInput, steps: list[_Step], offered: dict[str, Any], last_tool: str | None) -> str:
    """The final text: what each subject (and sub-agent) yielded, within ANSWER_CHARS, then a conclusion."""
    subjects = task.subjects
    found: dict[str, list[str]] = {}
    for step in steps:
        found.setdefault(step.key, []).extend(step.results)
    if len(subjects) == 1:
        lines = [f"Report on {_clip(subjects[0], 80)}."]
    else:
        lines = [
            f"Report on {len(subjects)} subjects."
            if subjects
            else "Report on the delegated work."
            if task.directives
            else "Report on the request."
        ]
    for key in dict.fromkeys(s.key for s in steps if s.name == SPAWN_AGENT):
        lines.append(f"Findings from sub-agent {_clip(key[2:], 40)}: {_quote(found[key])}")
    shown = 0
    for subject in subjects:
        if sum(len(line) for line in lines) > ANSWER_CHARS:
            break
        texts = found.get(f"s:{subject}")
        lines.append(
            f"Findings on {_clip(subject, 40)}: {_quote(texts)}"
            if texts
            else f"Notes on {_clip(subject, 60)}: {_describe(subject)}"
        )
        shown += 1
    if shown < len(subjects):
        lines.append(f"...and {len(subjects) - shown} more subjects handled the same way.")
    if found.get("h"):
        lines.append(f"The human answered: {_quote(found['h'])}")
    skipped = sum(1 for name, _ in task.directives if name not in offered)
    if skipped:
        lines.append(f"{skipped} directive(s) could not be acted on: the tool was not offered.")
    if last_tool is not None and _looks_like_error(last_tool):
        lines.append(f"A tool reported an error: {_clip(_squash(last_tool), QUOTE_CHARS)}")
    if len(lines) < 3:
        lines.append("Approach: read the task, gathered the material at hand and summarised what it shows.")
    lines.extend(_elaboration(task, sum(len(line) + 1 for line in lines)))
    used = sum(len(s.results) for s in steps)
    lines.append(f"Conclusion: {len(subjects)} subject(s) covered with {used} tool result(s); answered by {model}.")
    return "\n".join(lines)


def _elaboration(task: TaskInput, written_chars: int) -> list[str]:
    """Paragraphs that take a `length:` answer to about its size, each naming a subject in turn."""
    wanted = task.answer_tokens * CHARS_PER_TOKEN - written_chars
    topics = task.subjects or ("the request",)
    out: list[str] = []
    while wanted > 0:
        number = len(out) + 1
        subject = _clip(topics[len(out) % len(topics)], 60)
        line = (
            f"Point {number}: on {subject}, the evidence gathered so far agrees with the earlier points, and "
            f"point {number} adds that its details hold up when checked against the other subjects."
        )
        out.append(line)
        wanted -= len(line) + 1
    return out


def _quote(texts: list[str]) -> str:
    if not texts:
        return "no result yet."
    each = max(24, QUOTE_CHARS // len(texts))  # every tool gets a say, the line stays short
    return _clip(" | ".join(_clip(_squash(t), each) for t in texts), QUOTE_CHARS + 24)


def _describe(subject: str) -> str:
    words = re.findall(r"[\w'-]+", subject)
    terms = sorted(set(words), key=lambda w: (-len(w), w))[:3]
    return f"{len(words)} word(s); key terms: {', '.join(terms) or 'none'}."


def _looks_like_error(text: str) -> bool:
    return text.startswith(("error", "Error")) or "tool error" in text.lower()


def _offered(tools: list[dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """Offered tool name -> its parameters schema, in the order offered."""
    out: dict[str, dict[str, Any]] = {}
    for tool in tools or []:
        fn = tool.get("function", tool)
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            params = fn.get("parameters")
            out.setdefault(fn["name"], params if isinstance(params, dict) else {})
    return out


def _first_user_text(messages: list[dict[str, Any]]) -> str:
    return next((_text(m.get("content")) for m in messages if m.get("role") == "user"), "")


def _text(content: Any) -> str:
    """Message content as text, whether a string or a list of OpenAI content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _canonical(arguments: Any) -> str:
    """Arguments compared by meaning, so re-serialised JSON (key order, spaces) still matches."""
    if type(arguments) is str:
        return _canonical_text(arguments)
    return _canonical_value(arguments)


@functools.lru_cache(maxsize=65536)
def _canonical_text(arguments: str) -> str:
    # A conversation's earlier calls come back on every turn: each is parsed once.
    return _canonical_value(arguments)


def _canonical_value(arguments: Any) -> str:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return arguments
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _strip_bullet(line: str) -> str:
    return line[2:].lstrip() if line.startswith(("- ", "* ")) else line


def _squash(text: str) -> str:
    return " ".join(text.split())


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60].strip("-") or "item"
