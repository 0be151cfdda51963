"""Typed results: an agent's `output_type` becomes a JSON schema its final answer must match.

The schema is registered with the agent, so the workflow can check every final answer against it
without the author's Python type. A route whose engine or provider takes a JSON-schema response
format is asked for one; elsewhere (and after an answer that still does not match) the task runs a
repair step, paid from its budget like any other, that shows the model its answer's first problem.
"""

from __future__ import annotations

import json
from typing import Any

MAX_OUTPUT_SCHEMA_CHARS = 32_000  # registered with the agent and passed through workflow history: bounded
MAX_OUTPUT_REPAIRS = 2  # answers that still do not match after this many repair steps fail the task
OUTPUT_FORMAT_NAME = "berth_output"
_FENCE = "```"
REPAIR_SCHEMA_MARK = "matching this JSON schema, no prose and no code fence:\n"


def schema_problem(schema: dict[str, Any]) -> str | None:
    """Why `schema` cannot be an agent's output schema (too large, or not a JSON schema), or None."""
    import jsonschema

    size = len(json.dumps(schema))
    if size > MAX_OUTPUT_SCHEMA_CHARS:
        return f"the schema is {size} characters of JSON, more than {MAX_OUTPUT_SCHEMA_CHARS}"
    if schema.get("type") != "object":
        return "an output type is an object (a pydantic model), so its schema's type is 'object'"
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return f"not a JSON schema: {exc.message}"
    return None


def answer_json(text: str) -> str:
    """The JSON an answer holds: the answer itself, or the one fenced block a model wrapped it in."""
    stripped = text.strip()
    if stripped.startswith(_FENCE) and stripped.endswith(_FENCE) and stripped.count(_FENCE) == 2:
        stripped = stripped[len(_FENCE) : -len(_FENCE)].removeprefix("json").strip()
    return stripped


def answer_problem(text: str, schema: dict[str, Any]) -> str | None:
    """The first reason the answer does not match `schema` (where, and what), or None when it does."""
    import jsonschema

    try:
        value = json.loads(answer_json(text))
    except ValueError as exc:
        return f"the answer is not JSON ({exc})"
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(value))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "the answer"
    return f"{where}: {error.message}"


def repair_request(problem: str, schema: dict[str, Any]) -> str:
    """The message of a repair step: what was wrong, and the schema to answer in, nothing else."""
    return (
        f"Your answer does not match the required output ({problem}). Answer again with only a JSON object"
        f" {REPAIR_SCHEMA_MARK}{json.dumps(schema)}"
    )


def response_format(schema: dict[str, Any]) -> dict[str, Any]:
    """The OpenAI API's JSON-schema response format for `schema` (vLLM, SGLang and hosted providers take it)."""
    return {"type": "json_schema", "json_schema": {"name": OUTPUT_FORMAT_NAME, "schema": schema}}
