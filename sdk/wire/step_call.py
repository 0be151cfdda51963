"""One model call of a step as its bookkeeping sees it: which step it books under, how it reaches its model,
what it starts from and what it reports.

These are the values the LLM step passes its books (activities/step/ports.py `StepBooks`), beside the store or,
on a GPU node, over the control plane's step routes (whose HTTP bodies are step_books.py). Plain data, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._messages import Message
from .._spec import CheckpointRef
from .lease import StepPlacement
from .prompt_count import PromptTokenizer


@dataclass(frozen=True)
class CheckpointContent:
    """A checkpoint read back whole: the conversation up to it and the side state beside it."""

    ref: CheckpointRef
    task_id: str
    messages: list[Message]
    scratch: dict
    state: dict


@dataclass(frozen=True)
class ModelRoute:
    """How a step reaches a model: its litellm route string, base URL and key, and what it costs."""

    name: str
    litellm_model: str
    api_base: str | None
    api_key: str | None
    usd_per_1m_prompt: float | None
    usd_per_1m_completion: float | None
    served_by: str
    # The model's own prompt counting (its tokenizer and chat template) when it has real weights naming one;
    # None: counted as OpenAI counts (litellm), with the reservation margin for the difference.
    tokenizer: PromptTokenizer | None = None
    # Berth's own engines speak the OpenAI API: the step streams from them with a plain HTTP client
    # (activities/step/model_stream.py); hosted providers go through litellm, which knows each one's dialect.
    openai_compatible: bool = False


@dataclass(frozen=True)
class StepRef:
    """The step a model call books under. `lease_id` is the lease a GPU node holds for it (None on the control
    queue, beside the store): the control plane checks every node's booking against that lease."""

    task_id: str
    step: int
    model: str
    tenant: str
    lease_id: str | None = None


@dataclass(frozen=True)
class PreparedStep:
    """What a step starts from: the checkpoint after its pending step, the conversation up to it, and (on the
    fleet) the answer tokens the control plane granted after counting that conversation itself."""

    checkpoint: CheckpointRef
    messages: list[Message]
    max_tokens: int | None = None


@dataclass(frozen=True)
class CallReport:
    """What a step saw of its one model call, for the ledger and the "llm_call" event.

    `prompt_tokens` is what the step is charged for: the engine's count, less the kept text a continuation
    re-sent (booked once already, as kept). `lost_tokens`/`kept_tokens` are the step's dead attempts', shown
    in the event; on the fleet the control plane takes them (and the cost) from its own books instead.
    """

    attempt: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    ttft_s: float
    duration_s: float
    served_by: str
    response_id: str = ""
    finish_reason: str | None = None
    tool_calls: tuple[str, ...] = ()
    lost_tokens: int = 0
    kept_tokens: int = 0
    continued_tokens: int = 0  # the kept text's tokens the engine counted in its prompt (not charged again)
    placement: StepPlacement | None = None


@dataclass(frozen=True)
class Settled:
    """A booked call as the books priced it: on the fleet the control plane's price, whatever the node said."""

    recorded: bool  # False: the attempt was booked already (a retried settle)
    cost_usd: float
