"""The OpenAI→LLM translation: a request body becomes an :class:`LLMCall` for the worker.

:func:`translate_request` validates the body against :mod:`fucina.server.types`, applies the
server's limits and defaults (absent sampling fields take OpenAI's values, a missing seed is drawn
and reported back), maps the prediction and ``fucina.references`` to reference documents, and
gives speculation the tenant's own cross-request store. Nothing here touches HTTP.
"""

from __future__ import annotations

import inspect
import secrets
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from pydantic import ValidationError

from fucina.errors import ContextLengthExceeded, InvalidOption
from fucina.server import types as t
from fucina.server.errors import APIError, from_validation, model_not_found
from fucina.server.settings import ServerSettings
from fucina.server.state import ServerState
from fucina.tool_calls import tool_call_lark, tool_settings

__all__ = ["CHAT", "COMPLETIONS", "LLMCall", "translate_request"]

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


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
    if req.model is not None and req.model != state.model_id:
        raise model_not_found(req.model, state.model_id)
    llm = state.llm
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
    if endpoint == CHAT:
        messages = [m.as_message() for m in req.messages]
        options.update(_tool_options(req, llm))

        def run(**kw: Any) -> Iterator[Any]:
            return llm.chat(messages, **kw)
    else:
        prompt = req.prompt if isinstance(req.prompt, str) else list(req.prompt)

        def run(**kw: Any) -> Iterator[Any]:
            return llm.complete(prompt, **kw)

    def start() -> Iterator[Any]:
        try:
            return run(**options)
        except ContextLengthExceeded:
            if not defaulted or options["max_tokens"] is None:
                raise
            # The budget was ours, not the client's: generate up to the end of the context instead.
            return run(**{**options, "max_tokens": None})

    prefix = "chatcmpl-" if endpoint == CHAT else "cmpl-"
    return LLMCall(endpoint, req, start, seed, prediction, int(time.time()), prefix + secrets.token_hex(12),
                   stats=bool(ext is not None and ext.stats))


def _tool_options(req: t.ChatCompletionRequest, llm: Any) -> dict[str, Any]:
    """The request's tool arguments for ``llm.chat``, checked here (400 naming the field); a forced
    ``tool_choice`` adds the grammar that forces the calls (:func:`fucina.tool_calls.tool_call_lark`)."""
    if req.tools is None and req.tool_choice is None and req.parallel_tool_calls is None:
        return {}
    try:
        tool = tool_settings(req.tools, req.tool_choice, req.parallel_tool_calls)
    except InvalidOption as exc:
        raise APIError(400, str(exc), param=exc.param, code="invalid_value") from None
    options: dict[str, Any] = dict(tools=req.tools, tool_choice=req.tool_choice,
                                   parallel_tool_calls=req.parallel_tool_calls)
    if tool.choice.forced:
        if "grammar" not in inspect.signature(llm.chat).parameters:
            raise APIError(400, f"{tool.choice} needs the grammar support, which this server "
                           "lacks; use 'auto'", param="tool_choice", code="unsupported_parameter")
        from fucina.grammar import Grammar  # type: ignore[import-not-found]

        options["grammar"] = Grammar.lark(tool_call_lark(tool.tools, tool.choice, tool.parallel), param="tool_choice")
    return options


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
