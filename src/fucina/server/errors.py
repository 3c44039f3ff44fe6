"""The OpenAI error envelope ``{"error": {"message", "type", "param", "code"}}`` and its sources."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from fastapi.responses import JSONResponse

from fucina.errors import ContextLengthExceeded, FucinaError


class APIError(Exception):
    """An error answered as an OpenAI envelope with HTTP status ``status``."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def loc_param(loc: Sequence[Any]) -> str | None:
    """A pydantic error location as an OpenAI ``param``: ``messages[0].content``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or None


def from_validation(errors: Sequence[Mapping[str, Any]], skip: int = 0) -> APIError:
    """The 400 for the first error of a pydantic (or FastAPI) validation failure.

    ``skip`` drops leading location parts (FastAPI prefixes ``body``/``query``).
    """
    if not errors:
        return APIError(400, "invalid request")
    err = errors[0]
    loc = tuple(err.get("loc", ()))[skip:]
    param = loc_param(loc)
    msg = str(err.get("msg", "invalid value"))
    kind = err.get("type")
    if kind == "unsupported_parameter":
        return APIError(400, msg, param=param, code="unsupported_parameter")
    if kind == "missing":
        return APIError(400, f"{param} is required" if param else msg, param=param, code="missing_required_parameter")
    return APIError(400, f"{param}: {msg}" if param else msg, param=param, code="invalid_value")


def from_fucina(exc: FucinaError, *, chat: bool = True) -> APIError:
    """The 400 for a validation error fucina's API raised before any work (its ``param`` names the
    field); ``chat``: the request came to the chat endpoint (its prompt is ``messages``)."""
    if isinstance(exc, ContextLengthExceeded):
        return context_length_exceeded(exc, chat=chat)
    return APIError(400, str(exc), param=exc.param, code="invalid_value")


def context_length_exceeded(exc: ContextLengthExceeded, *, chat: bool) -> APIError:
    """The 400 of a request over the context, in OpenAI's words and with its code.

    Client libraries tell an overflow from other 400s by OpenAI's text ("This model's maximum context
    length is N tokens. ...": litellm's ``ContextWindowExceededError``) or by the code
    ``context_length_exceeded`` (langchain-openai), so both are OpenAI's; ``param`` still names
    the field to change (``max_tokens``, or the prompt: ``messages`` on the chat endpoint).
    """
    n, p, m = exc.n_ctx, exc.prompt_tokens, exc.max_tokens
    param = "messages" if chat and exc.param == "prompt" else exc.param
    head = f"This model's maximum context length is {n} tokens"
    if chat and m:
        msg = (f"{head}. However, you requested {p + m} tokens ({p} in the messages, {m} in the completion). "
               "Please reduce the length of the messages or completion.")
    elif chat:
        room = "" if p > n else ", which leaves no room for the completion"
        msg = f"{head}. However, your messages resulted in {p} tokens{room}. Please reduce the length of the messages."
    else:  # the legacy completions endpoint's wording; at least one token must be generated
        c = m or 1
        msg = (f"{head}, however you requested {p + c} tokens ({p} in your prompt; {c} for the completion). "
               "Please reduce your prompt; or completion length.")
    return APIError(400, msg, param=param, code="context_length_exceeded")


def engine_fault(detail: str = "") -> APIError:
    """The 500 of a fault inside the engine (the KV cache was reset; the server keeps serving)."""
    msg = "the inference engine failed on this request; its cache was reset, please retry"
    return APIError(500, f"{msg} ({detail})" if detail else msg, type="server_error", code="engine_error")


def model_not_found(requested: str, served: Sequence[str]) -> APIError:
    """The 404 of a request for ``requested`` on a server that answers only to the names ``served``."""
    names = ", ".join(repr(n) for n in served)
    return APIError(404, f"the model {requested[:256]!r} does not exist; this server serves {names}",
                    param="model", code="model_not_found")
