"""What the four activity modules above this package are built from: the LLM step's I/O and the activities' ports.

Nothing here is an activity (those are `activities/llm_step.py`, `bookkeeping.py`, `pool_lease.py` and
`tool_workers.py`), and nothing here is a pure rule (those live in the core, `sdk/wire/`: prices, the reserve
and answer-size rules, dead attempts, ledger rows, a streamed reply). What is here touches the world:

- `ports.py`: the services the activities are handed (store, ledger, catalogue, pool, the step's books), as protocols
- `store_books.py`: the step's books over those ports, beside the store (a GPU node's go over HTTP instead)
- `call_plan.py`: reads a step's conversation and counts its prompt, then sizes its call by the core's rule
- `tokens.py`: prompt counting with litellm's gpt-4o tokenizer (a model's own is in orchestrator/tokenizers/)
- `model_stream.py`: the engine stream client (plain HTTP for Berth's engines, litellm for hosted providers)
- `heartbeats.py`: a generation's typed progress, beaten to Temporal on a clock
- `writing_board.py`: each generation's text as it is written, for the readers that follow it
- `spans.py`, `call_metrics.py`, `task_metrics.py`: OpenTelemetry spans and metrics of the activities

The control plane imports some of these too (the API's step routes book through `store_books.py`, count with
`tokens.py` and read the `writing_board.py`); workflows never do.
"""
