"""Chat messages of a request (tool-calling history included) and the tool calls of an answer.

Below :mod:`fucina.server.types`, which builds the request and response bodies from these.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

__all__ = ["MAX_MESSAGES", "MAX_TEXT", "ChatMessage", "FunctionBody", "ToolCallBody", "unsupported"]

#: Longest text field (characters); the body limit (ServerSettings.max_body_bytes) binds first.
MAX_TEXT = 1 << 20
MAX_MESSAGES = 4096


def unsupported(field: str, why: str = "") -> PydanticCustomError:
    """The validation error of a field fucina refuses (turned into a 400 naming it)."""
    return PydanticCustomError("unsupported_parameter", "{field} is not supported by this server{why}",
                               {"field": field, "why": f": {why}" if why else ""})


def _text_parts(value: Any, field: str) -> str:
    """A string, or a list of ``{"type": "text", "text": ...}`` parts, as one string."""
    if isinstance(value, str):
        if len(value) > MAX_TEXT:
            raise PydanticCustomError("string_too_long", "{field} is longer than {n} characters",
                                      {"field": field, "n": MAX_TEXT})
        return value
    if isinstance(value, list):
        if len(value) > MAX_MESSAGES:
            raise PydanticCustomError("too_long", "{field} has more than {n} parts", {"field": field, "n": MAX_MESSAGES})
        texts = []
        for part in value:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                if isinstance(part, dict) and isinstance(part.get("type"), str) and part.get("type") != "text":
                    raise unsupported(f"{field} part type {part['type'][:40]!r}", "only text parts")
                raise PydanticCustomError("text_part", "{field} parts must be {{'type': 'text', 'text': string}}",
                                          {"field": field})
            texts.append(part["text"])
        text = "".join(texts)
        if len(text) > MAX_TEXT:
            raise PydanticCustomError("string_too_long", "{field} is longer than {n} characters",
                                      {"field": field, "n": MAX_TEXT})
        return text
    raise PydanticCustomError("text_type", "{field} must be a string or a list of text parts", {"field": field})


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ChatMessage(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    #: An assistant turn's calls: ``[{"id", "type": "function", "function": {"name", "arguments"}}]``.
    tool_calls: Optional[list[dict[str, Any]]] = Field(None, max_length=MAX_MESSAGES)
    #: Text, or None (only an assistant turn that called tools; it may also leave it out).
    content: Any
    name: Optional[str] = Field(None, max_length=256)
    #: The call a ``tool`` message answers.
    tool_call_id: Optional[str] = Field(None, max_length=256)

    @model_validator(mode="before")
    @classmethod
    def _calls_only(cls, v: Any) -> Any:
        if isinstance(v, dict) and "content" not in v and v.get("role") == "assistant" and v.get("tool_calls"):
            return {**v, "content": None}
        return v

    @field_validator("content", mode="before")
    @classmethod
    def _content(cls, v: Any, info) -> Optional[str]:
        if v is None and info.data.get("role") == "assistant" and info.data.get("tool_calls"):
            return None
        if v is None:
            raise PydanticCustomError("content_null", "content may be null only beside tool_calls", {})
        return _text_parts(v, "content")

    @field_validator("role", mode="before")
    @classmethod
    def _role(cls, v: Any) -> Any:
        if v == "function":
            raise unsupported("role 'function'", "use tools and role 'tool'")
        return v

    def as_message(self) -> dict[str, Any]:
        """The message as :meth:`fucina.LLM.chat` takes it."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls is not None:
            out["tool_calls"] = self.tool_calls
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None and self.role == "tool":
            out["name"] = self.name
        return out


class FunctionBody(_Out):
    name: str
    #: JSON text, as the model wrote it.
    arguments: str


class ToolCallBody(_Out):
    id: str
    type: Literal["function"] = "function"
    function: FunctionBody
