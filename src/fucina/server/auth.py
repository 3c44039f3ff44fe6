"""API keys: whether a request may use ``/v1/*`` and ``/metrics``, and which key it sent.

The key a request authenticates with names its tenant (:func:`fucina.server.tenants.tenant_of`).
"""

from __future__ import annotations

import hmac

from starlette.requests import Request

from fucina.server.errors import APIError
from fucina.server.settings import ServerSettings

__all__ = ["authorize"]


def authorize(request: Request, settings: ServerSettings) -> str | None:
    """The request's API key (None when the server has none); 401 unless it is one of them."""
    if not settings.api_keys:
        return None
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    given = token.strip().encode("utf-8", "replace")
    ok, matched = False, None
    for key in settings.api_keys:  # every key compared, in constant time each
        hit = hmac.compare_digest(given, key.encode("utf-8"))
        ok |= hit
        matched = key if hit else matched
    if scheme.lower() != "bearer" or not ok:
        raise APIError(401, "missing or invalid API key (send Authorization: Bearer KEY)",
                       code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})
    return matched
