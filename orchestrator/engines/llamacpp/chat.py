"""A conversation as the model was trained to read it: the GGUF's own chat template, rendered with Jinja.

The template is the model's `tokenizer.chat_template`, rendered the way Hugging Face's
`apply_chat_template` (and llama.cpp's `--jinja`) do: a sandboxed environment with
`trim_blocks` and `lstrip_blocks`, `raise_exception`, a `tojson` filter, and the variables
`messages`, `tools`, `add_generation_prompt`, `bos_token` and `eos_token`.

Tools are offered only when the template writes them: rendering a probe tool shows whether it
does (a template that ignores `tools` would silently drop them, and the model would answer as
if it had none). The calls are parsed back in the Hermes form (`<tool_call>{json}</tool_call>`),
the one most open models' templates use (Qwen 2.5, Hermes, SmolLM3); a template whose tools
are written some other way is refused rather than misread.

A continuation (`continue_final_message`) renders the conversation before the final assistant
message with its generation prompt and appends that message's text raw, so the model goes on
from the exact characters a cut generation had written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jinja2 import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
_PROBE_TOOL = "berth_probe_tool_7f3a"


class ChatTemplateError(ValueError):
    """The conversation cannot be rendered with this model's template; the message names the field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def _raise_exception(message: str) -> None:
    raise TemplateError(message)


def _tojson(
    value: Any,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
    ensure_ascii: bool = False,
) -> str:
    return json.dumps(value, indent=indent, separators=separators, sort_keys=sort_keys, ensure_ascii=ensure_ascii)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


@dataclass(frozen=True)
class Prompt:
    """A rendered conversation: the text to tokenize, and the prefix it ends with when it continues one."""

    text: str
    continued: str = ""  # the final assistant message's text, appended raw


class ChatTemplate:
    """One model's chat template, compiled once."""

    def __init__(self, source: str, bos_token: str = "", eos_token: str = "") -> None:
        if not source.strip():
            raise ValueError("the model has no chat template (tokenizer.chat_template is empty)")
        self.source = source
        self._template = _environment().from_string(source)
        self._special = {"bos_token": bos_token, "eos_token": eos_token}
        self.renders_tools = self._renders_tools()
        # The calls must come back in a form Berth can parse: Hermes tags, which the template then names.
        self.tool_syntax: str | None = "hermes" if self.renders_tools and TOOL_CALL_OPEN in source else None

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        continue_final_message: bool = False,
    ) -> Prompt:
        """The prompt for `messages` (OpenAI shape): with the assistant's generation prompt, or continuing
        the final assistant message."""
        if tools and self.tool_syntax is None:
            raise ChatTemplateError(
                "tools",
                "this model's chat template has no tool-call syntax Berth can parse "
                "(it writes no <tool_call> tags); send no tools, or tool_choice 'none'",
            )
        shaped = [_template_message(i, m) for i, m in enumerate(messages)]
        if not continue_final_message:
            return Prompt(self._render(shaped, tools, add_generation_prompt=True))
        last = shaped[-1]
        if last["role"] != "assistant" or not isinstance(last.get("content"), str) or last.get("tool_calls"):
            raise ChatTemplateError(
                "continue_final_message",
                "the last message must be the assistant's, with text content and no tool calls",
            )
        head = self._render(shaped[:-1], tools, add_generation_prompt=True)
        return Prompt(head + last["content"], continued=last["content"])

    def _render(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, add_generation_prompt: bool
    ) -> str:
        try:
            return self._template.render(
                messages=messages, tools=tools or None, add_generation_prompt=add_generation_prompt, **self._special
            )
        except TemplateError as exc:  # raise_exception(...) in the template, or a shape it cannot read
            raise ChatTemplateError("messages", f"the model's chat template refused the conversation: {exc}") from exc
        except (TypeError, KeyError, IndexError, AttributeError) as exc:
            raise ChatTemplateError("messages", f"the model's chat template cannot render it: {exc}") from exc

    def _renders_tools(self) -> bool:
        probe = [
            {
                "type": "function",
                "function": {
                    "name": _PROBE_TOOL,
                    "description": "probe",
                    "parameters": {"type": "object", "properties": {}},
                },
            }
        ]
        try:
            text = self._render([{"role": "user", "content": "hi"}], probe, add_generation_prompt=True)
        except ChatTemplateError:
            return False
        return _PROBE_TOOL in text


def _template_message(index: int, message: dict[str, Any]) -> dict[str, Any]:
    """A message as templates read it: text content (never None), tool-call arguments as objects."""
    shaped = dict(message)
    content = message.get("content")
    if isinstance(content, list):
        texts = []
        for part_index, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ChatTemplateError(
                    f"messages.{index}.content.{part_index}",
                    "this engine reads only text parts ({'type': 'text', 'text': ...})",
                )
            texts.append(part["text"])
        shaped["content"] = "".join(texts)
    elif content is None:
        shaped["content"] = ""
    calls = message.get("tool_calls")
    if calls:
        shaped["tool_calls"] = [_template_call(index, n, c) for n, c in enumerate(calls)]
    return shaped


def _template_call(index: int, number: int, call: Any) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise ChatTemplateError(f"messages.{index}.tool_calls.{number}.function", "needs a name")
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            pass  # a template that writes it as text still can
    # Templates read calls both ways: Qwen's `tool_call.function.name`, others `tool_call.name`.
    return {**call, "name": function["name"], "arguments": arguments, "function": {**function, "arguments": arguments}}


@dataclass(frozen=True)
class ParsedCall:
    name: str
    arguments: str  # JSON text, as OpenAI's tool_calls carry it


class ToolCallStream:
    """Splits generated text into plain text and Hermes tool calls, as it streams.

    Text is released at once except what could be the start of a `<tool_call>` tag; a call is
    released whole once its closing tag (or the end of the generation) arrives, since its JSON
    cannot be checked before. A call whose JSON does not parse is left as text: the model wrote
    it, and hiding it would lose what it said.
    """

    def __init__(self) -> None:
        self._pending = ""
        self._in_call = False

    def feed(self, text: str) -> list[str | ParsedCall]:
        self._pending += text
        out: list[str | ParsedCall] = []
        while True:
            if not self._in_call:
                start = self._pending.find(TOOL_CALL_OPEN)
                if start < 0:
                    keep = _partial_tag(self._pending, TOOL_CALL_OPEN)
                    if len(self._pending) > keep:
                        out.append(self._pending[: len(self._pending) - keep])
                        self._pending = self._pending[len(self._pending) - keep :]
                    return out
                if start:
                    out.append(self._pending[:start])
                self._pending = self._pending[start:]
                self._in_call = True
            end = self._pending.find(TOOL_CALL_CLOSE)
            if end < 0:
                return out
            raw = self._pending[: end + len(TOOL_CALL_CLOSE)]
            self._pending = self._pending[end + len(TOOL_CALL_CLOSE) :]
            self._in_call = False
            out.append(_parse_call(raw))

    def finish(self) -> list[str | ParsedCall]:
        """What is left at the end of the generation: an unclosed call is parsed if it can be, else text."""
        rest, self._pending = self._pending, ""
        if not rest:
            return []
        return [_parse_call(rest)] if self._in_call else [rest]


def _partial_tag(text: str, tag: str) -> int:
    """How many characters at the end of `text` could begin `tag`."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-size:]):
            return size
    return 0


def _parse_call(raw: str) -> str | ParsedCall:
    body = raw.removeprefix(TOOL_CALL_OPEN).removesuffix(TOOL_CALL_CLOSE).strip()
    try:
        call = json.loads(body)
    except ValueError:
        return raw
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return raw
    arguments = call.get("arguments", call.get("parameters", {}))
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return ParsedCall(call["name"], text)
