"""Request and response bodies of the OpenAI-compatible endpoints (pydantic v2).

Requests are validated strictly (``"temperature": "0.5"`` is a 400, not a silent conversion) with
bounded fields; unknown extra fields are ignored. Fields that exist in the OpenAI API but would
change the answer fucina gives (``logit_bias``, the legacy ``functions`` ...) are declared only to be
refused with a 400 naming them: none is ever silently ignored.

``n`` (1..:data:`MAX_N`) choices run one after another on the one model: choice ``i`` samples with
seed ``(seed + i) mod 2**63`` (when the request has no seed, the drawn one is offset the same way), so
each choice is what a request of ``n=1`` with that seed answers; a greedy request (``temperature=0``)
decodes once and repeats the answer. ``best_of`` is accepted only as 1 or equal to ``n``.
``logprobs`` are those of the model's raw distribution (before penalties, temperature and the cuts:
:mod:`fucina.logprobs`): chat takes ``logprobs: true`` with ``top_logprobs`` 0..20, completions
``logprobs`` 0..5 (the chosen token is added to each ``top_logprobs`` dict, as OpenAI does).

Tool calling: ``tools``, ``tool_choice`` and ``parallel_tool_calls`` are checked by
:func:`fucina.tool_calls.tool_settings` (the translation names the field at fault, e.g.
``tools[0].function.parameters``); history may hold assistant messages with ``tool_calls`` (their
``content`` may be null) and ``tool`` messages with the ``tool_call_id`` they answer.

Sampling defaults when a field is absent (or null) are OpenAI's: ``temperature=1``, ``top_p=1``;
the extensions ``top_k`` and ``min_p`` are off (0), ``repeat_penalty`` is 1 (off) and
``penalty_last_n`` 64 (llama.cpp's window for the three penalties). ``temperature=0`` is greedy;
a positive temperature must be at least :data:`MIN_TEMPERATURE`. Without ``max_tokens`` (or
``max_completion_tokens``) a chat answer runs to an end token or the end of the context (or to the
server's ``--max-tokens-limit``), a completion gets OpenAI's 16 tokens. ``model`` may be omitted.
``prediction`` (OpenAI's Predicted Outputs, on both endpoints) becomes a reference document speculation
drafts from: it can make an answer faster, never different. ``accepted_prediction_tokens`` counts the
drafted tokens taken from the prediction that verification accepted, ``rejected_prediction_tokens`` the
ones it rejected (both 0 when no draft came from it, and on a server with speculation off).

fucina's own request extension (the ``openai`` client sends it with ``extra_body``)::

    {"fucina": {"references": ["...", ...], "speculative": true, "stats": true}}

``references``: up to :data:`MAX_REFERENCES` documents (with a prediction, one fewer) to draft from in
this request, each a non-empty string or list of text parts of at most :data:`MAX_TEXT` characters;
``speculative``: this request's switch (a server started with ``--no-spec`` refuses ``true``);
``stats``: add the per-source acceptance and the gate state to the response's ``fucina`` block.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from fucina.server.logprob_bodies import ChoiceLogprobs, CompletionLogprobs

#: OpenAI's limit on stop sequences.
MAX_STOP = 4
MAX_STOP_CHARS = 512
MAX_INT = 2**31 - 1
MAX_SEED = 2**63 - 1
MAX_PROMPT_TOKENS = 1 << 20
#: Most choices per request (they run one after another).
MAX_N = 16
#: Most alternatives per token: chat's ``top_logprobs`` (fucina.LLM's limit, 20), legacy completions' ``logprobs``.
from fucina.logprobs import MAX_TOP_LOGPROBS  # noqa: E402
MAX_COMPLETION_LOGPROBS = 5
#: Reference documents per request, the prediction included (fucina.LLM's limit).
from fucina.speculative.index import MAX_REFERENCES  # noqa: E402  (defined once, with the index)
from fucina.server.messages import (MAX_MESSAGES, MAX_TEXT, ChatMessage, FunctionBody, ToolCallBody,  # noqa: E402,F401
                                    _text_parts, unsupported)
from fucina.server.formats import ResponseFormat, response_format  # noqa: E402,F401
#: Smallest positive temperature: below it ``logits / T`` can overflow float64 (use 0 for greedy).
MIN_TEMPERATURE = 1e-6

DEFAULT_TEMPERATURE = 1.0
DEFAULT_TOP_P = 1.0
DEFAULT_TOP_K = 0
DEFAULT_MIN_P = 0.0
DEFAULT_REPEAT_PENALTY = 1.0
DEFAULT_PENALTY_LAST_N = 64

FinishReason = Literal["stop", "length", "tool_calls"]


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)


class StreamOptions(_Body):
    include_usage: Optional[bool] = None


def _check_unsupported(name: str, value: Any) -> Any:
    """Refuse a value that would change the answer; the neutral values pass."""
    neutral = {
        "echo": (None, False), "suffix": (None, ""),
        "function_call": (None, "none"), "audio": (None,),
    }
    if name in ("functions", "logit_bias"):
        if name == "functions" and value:
            raise unsupported(name, "use tools")
        if value is None or value == [] or value == {}:
            return value
        raise unsupported(name)
    if name == "modalities":
        if value is None or value == ["text"]:
            return value
        raise unsupported(name, "only ['text']")
    if any(value is v or (type(value) is type(v) and value == v) for v in neutral[name]):
        return value
    raise unsupported(name)


def _count(v: Any, field: str, lo: int, hi: int, what: str) -> Optional[int]:
    """An optional integer field in ``lo..hi`` (null: absent), with a message naming the range."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise PydanticCustomError("out_of_range", "{field} must be an integer from {lo} to {hi} ({what}), got {v}",
                                  {"field": field, "lo": lo, "hi": hi, "what": what, "v": repr(v)[:40]})
    return v


def _prediction_text(v: Any) -> Optional[str]:
    if v is None:
        return None
    if not isinstance(v, dict) or v.get("type") != "content" or "content" not in v:
        raise PydanticCustomError("prediction", "prediction must be {{'type': 'content', 'content': ...}}", {})
    text = _text_parts(v["content"], "prediction.content")
    if not text:
        raise PydanticCustomError("empty", "prediction.content is empty", {})
    return text


class FucinaOptions(_Body):
    """The ``fucina`` request extension (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    references: Optional[tuple[str, ...]] = None
    speculative: Optional[bool] = None
    stats: bool = False

    @field_validator("references", mode="before")
    @classmethod
    def _references(cls, v: Any) -> Optional[tuple[str, ...]]:
        if v is None:
            return None
        if not isinstance(v, list):
            raise PydanticCustomError("references_type", "references must be a list of documents", {})
        if not 1 <= len(v) <= MAX_REFERENCES:
            raise PydanticCustomError("references_count", "references holds 1 to {n} documents, got {k}",
                                      {"n": MAX_REFERENCES, "k": len(v)})
        docs = []
        for i, doc in enumerate(v):
            text = _text_parts(doc, f"references[{i}]")
            if not text:
                raise PydanticCustomError("empty", "references[{i}] is empty", {"i": i})
            docs.append(text)
        return tuple(docs)


class _Sampling(_Body):
    """Fields both endpoints share."""

    model: Optional[str] = Field(None, max_length=256)
    max_tokens: Optional[int] = Field(None, ge=1, le=MAX_INT)
    temperature: Optional[float] = Field(None, ge=0.0, le=2.0)
    top_p: Optional[float] = Field(None, gt=0.0, le=1.0)
    frequency_penalty: Optional[float] = Field(None, ge=-2.0, le=2.0)
    presence_penalty: Optional[float] = Field(None, ge=-2.0, le=2.0)
    seed: Optional[int] = Field(None, ge=0, le=MAX_SEED)
    stop: Any = None
    stream: Optional[bool] = None
    stream_options: Optional[StreamOptions] = None
    user: Optional[str] = Field(None, max_length=256)
    # Extensions (llama.cpp's samplers).
    top_k: Optional[int] = Field(None, ge=0, le=MAX_INT)
    min_p: Optional[float] = Field(None, ge=0.0, lt=1.0)
    repeat_penalty: Optional[float] = Field(None, gt=0.0, le=10.0)
    penalty_last_n: Optional[int] = Field(None, ge=-1, le=MAX_INT)
    #: OpenAI's Predicted Outputs: text the answer is expected to repeat; fucina drafts from it.
    prediction: Any = None
    fucina: Optional[FucinaOptions] = None
    #: A :class:`ResponseFormat` after validation (None: plain text); completions take it too, as llama-server.
    response_format: Any = None
    #: Choices, run one after another (see the module docstring).
    n: Any = None
    # Declared only to be refused unless neutral.
    logit_bias: Any = None

    @field_validator("stop", mode="before")
    @classmethod
    def _stop(cls, v: Any) -> Optional[tuple[str, ...]]:
        if v is None:
            return None
        items = [v] if isinstance(v, str) else v
        if not isinstance(items, list):
            raise PydanticCustomError("stop_type", "stop must be a string or a list of strings", {})
        if len(items) > MAX_STOP:
            raise PydanticCustomError("too_long", "stop holds at most {n} sequences", {"n": MAX_STOP})
        for s in items:
            if not isinstance(s, str) or not 1 <= len(s) <= MAX_STOP_CHARS:
                raise PydanticCustomError("stop_item", "stop sequences must be strings of 1 to {n} characters",
                                          {"n": MAX_STOP_CHARS})
        return tuple(items) or None

    @field_validator("temperature")
    @classmethod
    def _temperature(cls, v: Optional[float]) -> Optional[float]:
        if v is not None and 0.0 < v < MIN_TEMPERATURE:
            raise PydanticCustomError("temperature", "temperature must be 0 (greedy) or at least {m}",
                                      {"m": MIN_TEMPERATURE})
        return v

    @field_validator("logit_bias", mode="before")
    @classmethod
    def _refuse(cls, v: Any, info) -> Any:
        return _check_unsupported(info.field_name, v)

    @field_validator("response_format", mode="before")
    @classmethod
    def _response_format(cls, v: Any) -> Optional[ResponseFormat]:
        return response_format(v)

    @field_validator("n", mode="before")
    @classmethod
    def _n(cls, v: Any) -> Optional[int]:
        return _count(v, "n", 1, MAX_N, "choices per request (they run one after another)")

    @field_validator("prediction", mode="before")
    @classmethod
    def _prediction(cls, v: Any) -> Optional[str]:
        return _prediction_text(v)

    @property
    def references(self) -> tuple[str, ...]:
        """The prediction (first, when there is one) and the ``fucina.references``."""
        extra = self.fucina.references if self.fucina is not None and self.fucina.references else ()
        return ((self.prediction,) if self.prediction else ()) + tuple(extra)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream and self.stream_options is not None and self.stream_options.include_usage)


class ChatCompletionRequest(_Sampling):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    max_completion_tokens: Optional[int] = Field(None, ge=1, le=MAX_INT)
    logprobs: Optional[bool] = None
    top_logprobs: Any = None
    #: Checked by :func:`fucina.tool_calls.tool_settings` in the translation (it names the field).
    tools: Any = None
    tool_choice: Any = None
    parallel_tool_calls: Optional[bool] = None
    functions: Any = None
    function_call: Any = None
    audio: Any = None
    modalities: Any = None

    @field_validator("functions", "function_call",
                     "audio", "modalities", mode="before")
    @classmethod
    def _refuse_chat(cls, v: Any, info) -> Any:
        return _check_unsupported(info.field_name, v)

    @field_validator("top_logprobs", mode="before")
    @classmethod
    def _top_logprobs(cls, v: Any) -> Optional[int]:
        return _count(v, "top_logprobs", 0, MAX_TOP_LOGPROBS, "most likely tokens per position")

    @property
    def alternatives(self) -> Optional[int]:
        """Alternatives per token for ``fucina.LLM`` (None: no logprobs)."""
        return (self.top_logprobs or 0) if self.logprobs else None


class CompletionRequest(_Sampling):
    """``POST /v1/completions``."""

    prompt: Any
    logprobs: Any = None
    best_of: Any = None
    echo: Any = None
    suffix: Any = None

    @field_validator("echo", "suffix", mode="before")
    @classmethod
    def _refuse_completion(cls, v: Any, info) -> Any:
        return _check_unsupported(info.field_name, v)

    @field_validator("logprobs", mode="before")
    @classmethod
    def _logprobs(cls, v: Any) -> Optional[int]:
        if v is False:  # what some clients send for "off"
            return None
        return _count(v, "logprobs", 0, MAX_COMPLETION_LOGPROBS, "most likely tokens per position")

    @field_validator("best_of", mode="before")
    @classmethod
    def _best_of(cls, v: Any) -> Optional[int]:
        return _count(v, "best_of", 1, MAX_N, "candidates per request")

    @property
    def alternatives(self) -> Optional[int]:
        """Alternatives per token for ``fucina.LLM`` (None: no logprobs)."""
        return self.logprobs

    @field_validator("prompt", mode="before")
    @classmethod
    def _prompt(cls, v: Any) -> Any:
        """One prompt: a string or token ids (a list of one of either is accepted too)."""
        if isinstance(v, list) and len(v) == 1 and isinstance(v[0], (str, list)):
            v = v[0]
        if isinstance(v, str):
            if len(v) > MAX_TEXT:
                raise PydanticCustomError("string_too_long", "prompt is longer than {n} characters", {"n": MAX_TEXT})
            return v
        if isinstance(v, list) and v and all(isinstance(t, int) and not isinstance(t, bool) for t in v):
            if len(v) > MAX_PROMPT_TOKENS:
                raise PydanticCustomError("too_long", "prompt has more than {n} tokens", {"n": MAX_PROMPT_TOKENS})
            return tuple(v)
        if isinstance(v, list) and len(v) > 1 and all(isinstance(p, (str, list)) for p in v):
            raise unsupported("a batch of prompts", "send one prompt per request")
        raise PydanticCustomError("prompt_type", "prompt must be a string or a non-empty list of token ids", {})


# -- responses -----------------------------------------------------------------------------------


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PromptTokensDetails(_Out):
    cached_tokens: int = 0


class CompletionTokensDetails(_Out):
    reasoning_tokens: int = 0
    accepted_prediction_tokens: int = 0
    rejected_prediction_tokens: int = 0


class UsageBody(_Out):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails
    completion_tokens_details: CompletionTokensDetails


class SourceStats(_Out):
    """One draft source's tokens in this request (``conversation``, ``ref0``.., ``recycling``)."""

    name: str
    drafted: int
    accepted: int


class FucinaInfo(_Out):
    """fucina's extension block: the seed used and what speculation did (see fucina.results).

    ``sources`` and ``gate`` are there when the request asked for ``"fucina": {"stats": true}``.
    """

    seed: int
    level: str
    speculative: bool
    steps: int = 0
    verifies: int = 0
    drafted: int = 0
    accepted: int = 0
    committed: int = 0
    acceptance: float = 0.0
    queue_seconds: float = 0.0
    prompt_seconds: float = 0.0
    first_token_seconds: float = 0.0
    generate_seconds: float = 0.0
    tokens_per_second: float = 0.0
    sources: Optional[list[SourceStats]] = None
    gate: Optional[str] = None
    #: Set when the draft source failed mid-request and the answer went on with plain steps.
    source_fault: Optional[str] = None


class AssistantMessage(_Out):
    role: Literal["assistant"] = "assistant"
    #: None when the answer is only tool calls.
    content: Optional[str]
    refusal: None = None
    tool_calls: Optional[list[ToolCallBody]] = None


class ChatChoice(_Out):
    index: int = 0
    message: AssistantMessage
    finish_reason: FinishReason
    logprobs: Optional[ChoiceLogprobs] = None


class ChatCompletionResponse(_Out):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    system_fingerprint: str
    choices: list[ChatChoice]
    usage: UsageBody
    fucina: FucinaInfo


class ChatChunkChoice(_Out):
    index: int = 0
    #: ``{"role": "assistant", "content": ""}`` first, then ``{"content": ...}`` or ``{"tool_calls":
    #: [{"index", "id", "type", "function": {"name", "arguments"}}]}`` (later pieces: ``index`` and
    #: ``function.arguments`` only), ``{}`` at the end.
    delta: dict[str, Any]
    finish_reason: Optional[FinishReason] = None
    logprobs: Optional[ChoiceLogprobs] = None


class ChatCompletionChunk(_Out):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    system_fingerprint: str
    choices: list[ChatChunkChoice]
    usage: Optional[UsageBody] = None
    fucina: Optional[FucinaInfo] = None


class CompletionChoice(_Out):
    text: str
    index: int = 0
    logprobs: Optional[CompletionLogprobs] = None
    finish_reason: Optional[FinishReason] = None


class CompletionResponse(_Out):
    """A whole ``text_completion``, or one streamed chunk of it (``usage`` only on the last)."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    system_fingerprint: str
    choices: list[CompletionChoice]
    usage: Optional[UsageBody] = None
    fucina: Optional[FucinaInfo] = None


class ModelCard(_Out):
    """One served model name. ``max_model_len`` is the context in tokens (vLLM's field, which
    litellm reads first); ``context_length`` the same number under the name OpenRouter and
    llama.cpp-style servers use (litellm's fallback)."""

    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "fucina"
    max_model_len: int
    context_length: int


class ModelList(_Out):
    object: Literal["list"] = "list"
    data: list[ModelCard]

