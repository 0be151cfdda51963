"""The `agent-sessions` scenario: generated traffic shaped like published statistics of real coding-agent sessions.

The source, under CC-BY 4.0: the GitHub Copilot coding-agent traces of 2026-06-01..07 in the public repository
Azure/AzurePublicDataset (`GitHubCopilotCodingAgentDataset2026.md`), with the paper Liu et al., "Agentic Coding
in the Wild", arXiv 2608.00101. The traces themselves are not at hand, only their published totals (quoted in
../shared/traces/README.md); each knob below names the total it comes from, or says that none is published
and what was assumed. The standard scenarios' other traffic is made up; this one is as close to the real
thing as a generator fed with totals gets.
"""

from __future__ import annotations

from ..catalogue import SEED_MODELS
from .workload import WorkloadSpec, zipf_shares

# What a result built on this scenario must carry (CC-BY 4.0 asks for the attribution).
SOURCE = (
    "GitHub Copilot coding-agent traces, 2026-06-01..07 (Azure/AzurePublicDataset, "
    'GitHubCopilotCodingAgentDataset2026.md), CC-BY 4.0: Liu et al., "Agentic Coding in the Wild", '
    "arXiv 2608.00101; the scenario draws from their published statistics"
)

# The published totals.
SESSIONS = 301_000
TURNS_PER_SESSION = 3.95  # user turns
LLM_CALLS_PER_TURN = 7.83
TOOL_CALLS_PER_TURN = 7.3
PROMPT_TOKENS = 631.4e9
COMPLETION_TOKENS = 4.91e9
CACHED_PROMPT_TOKENS = 540.95e9  # 86% of the prompt tokens
DISTINCT_MODELS = 37

# Derived: 301K × 3.95 × 7.83 = 9.31M calls, so 631.4B / 9.31M = 67.8k prompt tokens and 4.91B / 9.31M = 527
# completion tokens per call: prompt:completion 128.6:1.
CALLS = SESSIONS * TURNS_PER_SESSION * LLM_CALLS_PER_TURN
PROMPT_TO_COMPLETION = PROMPT_TOKENS / COMPLETION_TOKENS

# Llama 3.1's window (131,072 tokens). A 68k-token mean prompt needs a long-context model: of the catalogue's
# self-hosted models, qwen2.5-7b (32k) and smollm2-135m (8k, on a CPU) could not take most of these prompts.
_CONTEXT_WINDOW = 131_072
_OUTPUT_MAX = 4096  # the generator's default cap on an answer
# The generator's tool pause (2 s median) is per tool-calling LLM call, of which a turn has 7.83 - 1 = 6.83 (all
# but the answer); the published 7.3 tool calls per turn make 7.3 / 6.83 = 1.07 tools per pause.
_TOOL_S_PER_CALL = 2.0
# 37 models reduced to the fleet's catalogue: the long-context self-hosted models, largest first (a coding agent
# sends most of its calls to the strongest model it may use), with Zipf shares (s = 1.1: 57%, 26%, 17%); the
# published statistics give the count of models, not their shares.
LONG_CONTEXT_MODELS = tuple(
    e.name
    for e in sorted(SEED_MODELS, key=lambda e: e.weights_gib, reverse=True)
    if e.provider == "self-hosted" and e.context_window >= _CONTEXT_WINDOW
)

AGENT_SESSIONS = WorkloadSpec(
    duration_s=4 * 3600.0,
    # Not from the source (its rate is a whole service's): 25 sessions an hour, ~3,500 calls in 4 hours, keep the
    # standard fleet's GPUs about as busy as the steady scenario's 90 sessions an hour (seed 0, k8s-spread: 8.9
    # GPU-hours generating against steady's 8.2): each call here prefills and writes several times as much.
    sessions_per_hour=25,
    turns_per_session_mean=TURNS_PER_SESSION,
    calls_per_turn_mean=LLM_CALLS_PER_TURN,
    tool_s_median=_TOOL_S_PER_CALL * TOOL_CALLS_PER_TURN / (LLM_CALLS_PER_TURN - 1),
    # The user's pause between turns and the message sizes are not published: the generator's defaults, but for
    # the two knobs below.
    # Not published either: a coding agent's instructions and tool schemas, taken as 8,000 tokens.
    system_prompt_tokens=8000,
    # With that system prompt, tool results of median 2,100 tokens (file reads, test output) grow a session's
    # prompts to a mean of ~68k tokens: 128:1 against the outputs below (prompts stop growing at the window,
    # where an agent would compact its context).
    tool_result_tokens_median=2100,
    # Lognormal outputs of median 245 (answers 4×, capped at 4,096) average 527 tokens a call.
    output_tokens_median=245,
    output_tokens_max=_OUTPUT_MAX,
    context_limit_tokens=_CONTEXT_WINDOW - _OUTPUT_MAX,  # a prompt leaves room for the longest answer
    models=zipf_shares(LONG_CONTEXT_MODELS),
    # The published calls per turn count every call of a turn; no sub-agent figure is published, so sub-agents
    # would only add calls the source does not show.
    subagent_probability=0.0,
    # The 86% of prompt tokens served from cache needs no knob: the simulation prefills only the new 14% of a
    # prompt on the replica that served the session's previous call (PlacementConfig.prefix_cacheable_fraction).
)
