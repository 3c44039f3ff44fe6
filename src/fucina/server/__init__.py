"""fucina's OpenAI-compatible HTTP server (``fucina serve``).

>>> from fucina.api import LLM
>>> from fucina.server import ServerSettings, create_app
>>> app = create_app(LLM("smollm2-135m"), ServerSettings(api_keys=("secret",)))   # doctest: +SKIP

Layout, top down (an import-linter contract keeps it): :mod:`~fucina.server.routes` (the FastAPI
factory, the endpoints, reading a request), :mod:`~fucina.server.responses` (the JSON and SSE
answers, metrics and the log line of a request), :mod:`~fucina.server.translate` (an OpenAI request
body → the ``LLM`` call) and :mod:`~fucina.server.auth` (API keys), :mod:`~fucina.server.state`
(what the routes share), :mod:`~fucina.server.worker` (the thread owning the model, the bounded
FIFO), :mod:`~fucina.server.metrics` (Prometheus text), :mod:`~fucina.server.tenants` (one
cross-request index per API key), :mod:`~fucina.server.index_files` (their on-disk format),
:mod:`~fucina.server.errors` (the OpenAI error envelope), :mod:`~fucina.server.types`
(request/response bodies and the sampling defaults), :mod:`~fucina.server.settings` (the frozen
:class:`ServerSettings`). Needs the ``server`` extra (``fastapi``, ``uvicorn``, ``pydantic>=2``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["ServerSettings", "create_app"]


def __getattr__(name: str) -> Any:
    # Lazy, so `fucina serve --help` (which reads fucina.server.settings) works without the extra.
    if name == "create_app":
        from fucina.server.routes import create_app

        return create_app
    if name == "ServerSettings":
        from fucina.server.settings import ServerSettings

        return ServerSettings
    raise AttributeError(f"module 'fucina.server' has no attribute {name!r}")
