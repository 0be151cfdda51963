"""The simulated engine's JSON-schema response format: an answer that matches the schema it was given.

A real engine constrains its decoding to the schema; this one fills the schema from its prose answer
(strings take its first line, cut to their maximum length; numbers their least allowed value; arrays one
item), so a task with an output type runs on the simulated fleet as it would on vLLM. Patterns and
formats are not generated: a schema that needs them meets the workflow's repair step, then a refusal.
"""

from __future__ import annotations

from typing import Any

MAX_DEPTH = 16  # a recursive model ($ref to itself) stops here, with its optional fields left out


def instance(schema: dict[str, Any], text: str) -> Any:
    """A value matching `schema` (JSON Schema as pydantic writes it), built from the answer `text`."""
    return _value(schema, schema.get("$defs", {}), (text.strip().splitlines() or ["answer"])[0], 0)


def _value(schema: dict[str, Any], defs: dict[str, Any], line: str, depth: int) -> Any:
    if "$ref" in schema:
        return _value(defs.get(schema["$ref"].rsplit("/", 1)[-1], {}), defs, line, depth + 1)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    for union in ("anyOf", "oneOf", "allOf"):
        if schema.get(union):
            options = [o for o in schema[union] if o.get("type") != "null"] or schema[union]
            return _value(options[0], defs, line, depth)
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        required = set(schema.get("required", ()))
        properties = schema.get("properties", {})
        return {
            name: _value(sub, defs, line, depth + 1)
            for name, sub in properties.items()
            if name in required or depth < MAX_DEPTH
        }
    if kind == "array":
        least = max(int(schema.get("minItems", 1)), 1) if depth < MAX_DEPTH else int(schema.get("minItems", 0))
        return [_value(schema.get("items", {}), defs, line, depth + 1) for _ in range(least)]
    if kind in ("integer", "number"):
        least = schema.get("minimum", schema.get("exclusiveMinimum", 0))
        value = least + (1 if "exclusiveMinimum" in schema and "minimum" not in schema else 0)
        return int(value) if kind == "integer" else float(value)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    text = line[: schema.get("maxLength", len(line))]
    return text.ljust(int(schema.get("minLength", 0)), ".")
