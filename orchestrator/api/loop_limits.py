"""What an own loop's call must fit before it is sent to the workflow: the model's context window, and what one
Temporal payload can carry. A call past either is refused here, naming `messages`, and the task goes on: sent
on, the first failed the task's step (its engine refused the prompt, and a failed model call ends the task), the
second failed the update itself (Temporal refuses an oversized payload, the API answered 503 and the workflow
task that carried it failed again and again).
"""

from __future__ import annotations

from activities.step.tokens import count_prompt, sendable_tools
from sdk import Message
from sdk.wire.catalogue import ModelEntry
from sdk.wire.limits import MIN_ANSWER_TOKENS, reservation_margin
from sdk.wire.own_loop import LoopCall
from sdk.wire.prompt_count import PromptCount

from ..tokenizers import ModelTokenizer, TokenizerUnreadable, tokenizers_under
from .errors import invalid
from .services import Services

# Temporal refuses a payload past 2 MiB (its default `limit.blobSize.error`). What one call adds rides in the
# update that carries it, again in the next step's input (with the step before's reply and the task's state
# beside it), and a workflow task's completion can carry both under gRPC's 4 MiB a request: half the payload
# limit leaves room for all of that.
MAX_LOOP_CALL_BYTES = 1024 * 1024


async def check_context_window(
    svc: Services,
    entry: ModelEntry,
    instructions: str | None,
    conversation: list[Message],
    tools: list[dict],
    answer: tuple[int, str | None],
) -> None:
    """Refuse a call whose prompt and answer cannot fit its model's context window (the engine would refuse it,
    and a refused model call fails the task), counted as the control plane counts a step's prompt
    (orchestrator/api/steps.py `prepare`): the same messages, the call's instructions first, its tools, the
    model's own tokenizer where it has one. `answer` is the most answer tokens the step may ask for, and the
    call's field that asked for them (None: the agent's `max_tokens_per_step` did)."""
    messages = [m.to_openai() for m in conversation]
    if instructions:
        messages.insert(0, {"role": "system", "content": instructions})
    counted = await svc.db(_count, svc, entry, messages, sendable_tools(tools) or None)
    prompt = counted.tokens + reservation_margin(counted.tokens, counted.exact)
    window = entry.context_window
    answer_tokens, answer_field = answer
    if prompt + answer_tokens <= window:
        return
    said = (
        f"the call's prompt is {counted.tokens:,} tokens{'' if counted.exact else ' (with a margin for the count)'},"
        f" and {entry.name}'s context window is {window:,} tokens"
    )
    if prompt + MIN_ANSWER_TOKENS > window or answer_field is None:
        raise invalid(
            "messages",
            f"{said}, which must also hold the answer ({answer_tokens:,} tokens at most): shorten the conversation"
            " (drop or summarise earlier turns, shorten tool results), or ask for fewer answer tokens"
            " (max_completion_tokens); the task goes on and takes the shorter call",
        )
    raise invalid(
        answer_field,
        f"{said}, which leaves {window - prompt:,} answer tokens, not the {answer_tokens:,} asked: ask for fewer,"
        " or shorten the conversation; the task goes on and takes the shorter call",
    )


def _count(svc: Services, entry: ModelEntry, messages: list[dict], tools: list[dict] | None) -> PromptCount:
    """The prompt's tokens (blocking: run in a thread). A model whose tokenizer cannot be read now is counted by
    litellm's formula: the step's own prepare refuses it for that, not this check."""
    tokenizer: ModelTokenizer | None
    try:
        tokenizer = tokenizers_under(svc.config.data_dir).for_entry(entry)
    except TokenizerUnreadable:
        tokenizer = None
    return count_prompt(messages, tools, tokenizer)


def check_payload(call: LoopCall) -> None:
    """Refuse a call that adds more to the task's conversation than one Temporal payload can carry."""
    size = len(call.model_dump_json().encode())
    if size > MAX_LOOP_CALL_BYTES:
        raise invalid(
            "messages",
            f"the messages this call adds to the task's conversation (with its instructions and tools) come to"
            f" {_mib(size)}; one call may add at most {_mib(MAX_LOOP_CALL_BYTES)}, what the task's workflow can"
            " carry in one message (Temporal's payload limit): shorten what it adds (long tool results, pasted"
            " documents); the task goes on and takes the shorter call",
        )


def _mib(size: int) -> str:
    return f"{size / 2**20:.2f} MiB"
