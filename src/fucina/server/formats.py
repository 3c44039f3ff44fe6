"""``response_format``, validated: what a request asks its answer to be (the grammar is built in
:mod:`fucina.server.translate`, which names ``response_format.json_schema`` when it cannot be enforced)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional

from pydantic_core import PydanticCustomError

__all__ = ["ResponseFormat", "response_format"]


@dataclass(frozen=True)
class ResponseFormat:
    """A validated ``response_format``: ``json_object``, or ``json_schema`` with its schema."""

    type: Literal["json_object", "json_schema"]
    schema: Optional[dict] = None
    name: Optional[str] = None
    strict: bool = False


def response_format(v: Any) -> Optional[ResponseFormat]:
    """OpenAI's ``response_format``: ``{"type": "text" | "json_object"}`` or ``{"type": "json_schema",
    "json_schema": {"name", "schema", "strict", "description"}}``; text is the same as none."""
    if v is None:
        return None
    if not isinstance(v, dict) or v.get("type") not in ("text", "json_object", "json_schema"):
        raise PydanticCustomError("response_format", "response_format.type must be 'text', 'json_object' or "
                                  "'json_schema'", {})
    if v["type"] == "text":
        return None
    if v["type"] == "json_object":
        return ResponseFormat("json_object")
    spec = v.get("json_schema")
    if not isinstance(spec, dict):
        raise PydanticCustomError("response_format", "response_format.json_schema must be an object with a "
                                  "'schema'", {})
    schema, name, strict = spec.get("schema", {}), spec.get("name"), spec.get("strict")
    if not isinstance(schema, dict):
        raise PydanticCustomError("response_format", "response_format.json_schema.schema must be an object", {})
    if name is not None and not (isinstance(name, str) and 1 <= len(name) <= 64):
        raise PydanticCustomError("response_format", "response_format.json_schema.name must be a string of 1 "
                                  "to 64 characters", {})
    if strict is not None and not isinstance(strict, bool):
        raise PydanticCustomError("response_format", "response_format.json_schema.strict must be a boolean", {})
    return ResponseFormat("json_schema", schema, name, bool(strict))
