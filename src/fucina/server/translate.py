"""The OpenAI→LLM translation: a request body becomes an :class:`LLMCall` for the worker.

:func:`translate_request` validates the body against :mod:`fucina.server.types`, applies the
server's limits and defaults (absent sampling fields take OpenAI's values, a missing seed is drawn
and reported back), maps the prediction and ``fucina.references`` to reference documents, and
gives speculation the tenant's own cross-request store. Nothing here touches HTTP.

A request for ``n`` choices runs them one after another in the one job: choice ``i`` is the call of
``n=1`` with seed ``(seed + i) mod 2**63``; a greedy request decodes once and repeats that answer
(:class:`ChoiceChunk` says which choice a chunk belongs to, and whether it is such a copy).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from pydantic import ValidationError

from fucina.errors import ContextLengthExceeded, InvalidGrammar, InvalidOption
from fucina.grammar import Grammar
from fucina.server import types as t
from fucina.server.errors import APIError, from_validation, model_not_found
from fucina.server.settings import ServerSettings
from fucina.server.state import ServerState
from fucina.tool_calls import tool_settings

__all__ = ["CHAT", "COMPLETIONS", "ChoiceChunk", "LLMCall", "choice_seed", "translate_request"]

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


@dataclass(frozen=True)
class ChoiceChunk:
    """One chunk (a :class:`fucina.results.CompletionChunk`) of choice ``index``; ``copy``: it repeats
    choice 0's chunk of a greedy request (no generation ran for it)."""

    index: int
    chunk: Any
    copy: bool = False


def choice_seed(seed: int, index: int) -> int:
    """The seed choice ``index`` samples with: ``(seed + index) mod 2**63``."""
    return (seed + index) % (t.MAX_SEED + 1)


@dataclass(frozen=True)
class LLMCall:
    """One validated request, ready for the worker."""

    endpoint: str
    request: t.ChatCompletionRequest | t.CompletionRequest
    #: Starts the generation (``llm.chat``/``llm.complete`` with the request's options); run by the worker.
    start: Callable[[], Iterator[Any]]
    seed: int
    #: The prediction is the request's first reference document (``ref0``).
    prediction: bool
    created: int
    id: str
    #: The request asked for per-source stats (``"fucina": {"stats": true}``).
    stats: bool = False
    #: Choices (``n``), run one after another.
    n: int = 1
    #: Alternatives per token when the request asked for logprobs (None: it did not).
    logprobs: int | None = None
    #: The model name the response reports: the request's own (one of the served names) or the server's id.
    model: str = ""


def translate_request(endpoint: str, body: dict[str, Any], state: ServerState, *, tenant: str) -> LLMCall:
    """Validate ``body`` (the JSON of a request to ``endpoint``) and build the ``llm.chat`` /
    ``llm.complete`` call it asks for: absent fields take the defaults of :mod:`fucina.server.types`,
    a missing seed is drawn here, and the cross-request store is ``tenant``'s own. Raises
    :class:`~fucina.server.errors.APIError` (400/404) for what the server cannot run."""
    model_cls = t.ChatCompletionRequest if endpoint == CHAT else t.CompletionRequest
    try:
        req = model_cls.model_validate(body)
    except ValidationError as exc:
        raise from_validation(exc.errors(include_url=False)) from None
    if req.model is not None and not state.serves(req.model):
        raise model_not_found(req.model, state.model_ids)
    llm = state.llm
    n, alternatives = _choices(endpoint, req)
    max_tokens, defaulted = _token_budget(endpoint, req, state.settings)
    seed = req.seed if req.seed is not None else secrets.randbelow(t.MAX_SEED + 1)
    options: dict[str, Any] = dict(
        max_tokens=max_tokens,
        temperature=t.DEFAULT_TEMPERATURE if req.temperature is None else req.temperature,
        top_p=t.DEFAULT_TOP_P if req.top_p is None else req.top_p,
        top_k=t.DEFAULT_TOP_K if req.top_k is None else req.top_k,
        min_p=t.DEFAULT_MIN_P if req.min_p is None else req.min_p,
        repeat_penalty=t.DEFAULT_REPEAT_PENALTY if req.repeat_penalty is None else req.repeat_penalty,
        frequency_penalty=req.frequency_penalty or 0.0,
        presence_penalty=req.presence_penalty or 0.0,
        penalty_last_n=t.DEFAULT_PENALTY_LAST_N if req.penalty_last_n is None else req.penalty_last_n,
        seed=seed,
        stop=list(req.stop) if req.stop else None,
        stream=True,
        logprobs=alternatives,
    )
    ext = req.fucina
    speculative = llm.speculative
    if ext is not None and ext.speculative is not None:
        if ext.speculative and not llm.speculative:
            raise APIError(400, "this server runs with speculation off (--no-spec)", param="fucina.speculative",
                           code="invalid_value")
        speculative = ext.speculative
    options["speculative"] = speculative
    refs = req.references
    if len(refs) > t.MAX_REFERENCES:
        raise APIError(400, f"a prediction and {len(refs) - 1} references make {len(refs)} documents; at most "
                       f"{t.MAX_REFERENCES} per request", param="fucina.references", code="invalid_value")
    # Predictions and references only feed drafts: without speculation they cannot change the answer.
    prediction = bool(req.prediction) and speculative
    if refs and speculative:
        options["references"] = list(refs)
    if state.tenants is not None and speculative:
        # Only this tenant's own earlier requests: drafting from another's would leak its text
        # through timing (a repeat of it would run measurably faster).
        options["cross_request"] = state.tenants.store(tenant)
    if req.response_format is not None:
        options["grammar"] = _grammar(req.response_format)
    if endpoint == CHAT:
        messages = [m.as_message() for m in req.messages]
        options.update(_tool_options(req))

        def run(**kw: Any) -> Iterator[Any]:
            return llm.chat(messages, **kw)
    else:
        prompt = req.prompt if isinstance(req.prompt, str) else list(req.prompt)

        def run(**kw: Any) -> Iterator[Any]:
            return llm.complete(prompt, **kw)

    def run_choice(index: int) -> Iterator[Any]:
        kw = {**options, "seed": choice_seed(seed, index)}
        try:
            return run(**kw)
        except ContextLengthExceeded:
            if not defaulted or kw["max_tokens"] is None:
                raise
            # The budget was ours, not the client's: generate up to the end of the context instead.
            return run(**{**kw, "max_tokens": None})

    def start() -> Iterator[ChoiceChunk]:
        first = run_choice(0)  # here, so that an invalid request fails before the job reports "started"
        return _run_choices(first, run_choice, n, greedy=options["temperature"] <= 0)

    prefix = "chatcmpl-" if endpoint == CHAT else "cmpl-"
    return LLMCall(endpoint, req, start, seed, prediction, int(time.time()), prefix + secrets.token_hex(12),
                   stats=bool(ext is not None and ext.stats), n=n, logprobs=alternatives,
                   model=req.model or state.model_id)


def _run_choices(first: Iterator[Any], run_choice: Callable[[int], Iterator[Any]], n: int, *,
                 greedy: bool) -> Iterator[ChoiceChunk]:
    """The chunks of choices 0..n-1, one choice after another (a greedy answer is decoded once)."""
    seen: list[Any] = []
    for index in range(n):
        if index and greedy:
            for chunk in seen:
                yield ChoiceChunk(index, chunk, copy=True)
            continue
        chunks = first if index == 0 else run_choice(index)
        try:
            for chunk in chunks:
                if greedy:
                    seen.append(chunk)
                yield ChoiceChunk(index, chunk)
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()  # a cancelled job ends the running generation now, not at garbage collection


def _choices(endpoint: str, req: t.ChatCompletionRequest | t.CompletionRequest) -> tuple[int, int | None]:
    """The request's choice count and alternatives per token (None: no logprobs); 400 for what
    disagrees (``best_of`` other than 1 or ``n``, ``top_logprobs`` without ``logprobs``)."""
    n = req.n or 1
    if endpoint == COMPLETIONS and req.best_of not in (None, 1, n):
        raise APIError(400, f"best_of={req.best_of} is not supported by this server: only 1 or n (every "
                       "candidate is returned)", param="best_of", code="unsupported_parameter")
    if endpoint == CHAT and req.top_logprobs and not req.logprobs:
        raise APIError(400, "top_logprobs needs logprobs: true", param="top_logprobs", code="invalid_value")
    return n, req.alternatives


def _grammar(fmt: t.ResponseFormat) -> Grammar:
    """The constraint a ``response_format`` asks for; 400 naming ``response_format.json_schema`` when
    the schema is not one the constraint library can enforce."""
    if fmt.type == "json_object":
        return Grammar.json_object(param="response_format")
    try:
        return Grammar.json_schema(fmt.schema or {}, param="response_format.json_schema")
    except InvalidGrammar as exc:
        raise APIError(400, f"response_format.json_schema: {exc}", param=exc.param, code="invalid_value") from None


def _tool_options(req: t.ChatCompletionRequest) -> dict[str, Any]:
    """The request's tool arguments for ``llm.chat``, checked here (400 naming the field)."""
    if req.tools is None and req.tool_choice is None and req.parallel_tool_calls is None:
        return {}
    try:
        tool = tool_settings(req.tools, req.tool_choice, req.parallel_tool_calls)
    except InvalidOption as exc:
        raise APIError(400, str(exc), param=exc.param, code="invalid_value") from None
    if tool.choice.forced and req.response_format is not None:
        raise APIError(400, f"{tool.choice} forces a tool call, response_format a reply: send one of them",
                       param="tool_choice", code="invalid_value")
    # A forced choice is enforced by llm.chat itself: the grammar of the call masks every sampled row.
    return dict(tools=req.tools, tool_choice=req.tool_choice, parallel_tool_calls=req.parallel_tool_calls)


def _token_budget(endpoint: str, req: t.ChatCompletionRequest | t.CompletionRequest,
                  settings: ServerSettings) -> tuple[int | None, bool]:
    """The request's ``max_tokens`` (None: up to the end of the context) and whether the server
    chose it (the client sent none); 400 when the client's is over the server's limit."""
    max_tokens, defaulted = req.max_tokens, False
    if endpoint == CHAT and req.max_completion_tokens is not None:
        if max_tokens is not None and max_tokens != req.max_completion_tokens:
            raise APIError(400, "max_tokens and max_completion_tokens disagree; send one of them",
                           param="max_completion_tokens", code="invalid_value")
        max_tokens = req.max_completion_tokens
    limit = settings.max_tokens_limit
    if max_tokens is None:
        defaulted = True
        max_tokens = settings.completion_max_tokens if endpoint == COMPLETIONS else None
        if limit is not None:
            max_tokens = limit if max_tokens is None else min(max_tokens, limit)
    elif limit is not None and max_tokens > limit:
        raise APIError(400, f"max_tokens is {max_tokens}; this server allows at most {limit}",
                       param="max_tokens", code="invalid_value")
    return max_tokens, defaulted
