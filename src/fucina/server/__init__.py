"""fucina's OpenAI-compatible HTTP server (``fucina serve``).

>>> from fucina.api import LLM
>>> from fucina.server import ServerSettings, create_app
>>> app = create_app(LLM("smollm2-135m"), ServerSettings(api_keys=("secret",)))   # doctest: +SKIP

Layout: :mod:`~fucina.server.settings` (the frozen :class:`ServerSettings`),
:mod:`~fucina.server.types` (request/response bodies and the sampling defaults),
:mod:`~fucina.server.app` (the FastAPI factory and the routes), :mod:`~fucina.server.worker`
(the thread owning the model, the bounded FIFO), :mod:`~fucina.server.metrics` (Prometheus text),
:mod:`~fucina.server.errors` (the OpenAI error envelope). Needs the ``server`` extra
(``fastapi``, ``uvicorn``, ``pydantic>=2``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["ServerSettings", "create_app"]


def __getattr__(name: str) -> Any:
    # Lazy, so `fucina serve --help` (which reads fucina.server.settings) works without the extra.
    if name == "create_app":
        from fucina.server.app import create_app

        return create_app
    if name == "ServerSettings":
        from fucina.server.settings import ServerSettings

        return ServerSettings
    raise AttributeError(f"module 'fucina.server' has no attribute {name!r}")
