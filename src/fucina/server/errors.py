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


def from_fucina(exc: FucinaError) -> APIError:
    """The 400 for a validation error fucina's API raised before any work (its ``param`` names the field)."""
    if isinstance(exc, ContextLengthExceeded):
        return APIError(400, str(exc), param=exc.param, code="context_length_exceeded")
    return APIError(400, str(exc), param=exc.param, code="invalid_value")


def engine_fault(detail: str = "") -> APIError:
    """The 500 of a fault inside the engine (the KV cache was reset; the server keeps serving)."""
    msg = "the inference engine failed on this request; its cache was reset, please retry"
    return APIError(500, f"{msg} ({detail})" if detail else msg, type="server_error", code="engine_error")


def model_not_found(requested: str, served: str) -> APIError:
    """The 404 of a request for ``requested`` on a server that serves only ``served``."""
    return APIError(404, f"the model {requested[:256]!r} does not exist; this server serves {served!r}",
                    param="model", code="model_not_found")
