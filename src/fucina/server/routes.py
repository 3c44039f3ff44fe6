"""The routes: ``create_app(llm, settings)`` builds the FastAPI app; its state is ``app.state.fucina``.

Endpoints: ``POST /v1/chat/completions``, ``POST /v1/completions``, ``GET /v1/models``
(``/v1/models/{id}``), ``GET /health`` (never needs a key; answers while a generation runs) and
``GET /metrics`` (Prometheus text). When API keys are set, ``/v1/*`` and ``/metrics`` need
``Authorization: Bearer KEY``.

Every error is an OpenAI envelope ``{"error": {"message", "type", "param", "code"}}``: 400 for
invalid values (``param`` names the field), 401 for a missing or wrong key, 404 for an unknown
model or route, 413 for a body over ``max_body_bytes``, 429 (with ``Retry-After``) when the queue is
full, 500 for an engine fault (the KV cache is reset and the server keeps serving).

**Lossless through the wire**: a request runs ``llm.chat``/``llm.complete`` with exactly the
request's settings (absent fields take the defaults in :mod:`fucina.server.types`) and its seed;
when the request has none, the server draws one and reports it in the response's ``fucina.seed``,
so any answer can be reproduced in-process with ``speculative=False`` — bit for bit when the level
(in ``system_fingerprint`` and ``/health``) is *exact*; at *distribution* level (the standard engine
build) a speculative answer follows plain decoding's distribution but may differ at a near-tie.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from fucina import __version__
from fucina.errors import InvalidOption
from fucina.server import types as t
from fucina.server.auth import authorize
from fucina.server.errors import APIError, from_validation, model_not_found
from fucina.server.index_files import tokenizer_fingerprint
from fucina.server.metrics import Metrics
from fucina.server.responses import (CLIENT_CLOSED, EventStream, Record, error_for, event_stream, json_response,
                                     raise_for)
from fucina.server.settings import ServerSettings
from fucina.server.state import ServerState
from fucina.server.tenants import TenantIndexes, tenant_of
from fucina.server.translate import CHAT, COMPLETIONS, translate_request
from fucina.server.worker import Job, QueueFull, Worker

if TYPE_CHECKING:
    from fucina.api import LLM

__all__ = ["create_app", "system_fingerprint"]

log = logging.getLogger("fucina.server")

#: How often a non-streaming request checks whether its client is still there (seconds).
DISCONNECT_POLL = 0.25


def system_fingerprint(llm: LLM, level: str) -> str:
    """``fucina-<version>-<engine build>-<level>``, e.g. ``fucina-0.1.0-llama.cpp-0.3.36-distribution``."""
    module = type(llm.model).__module__
    if module.startswith("fucina.backends.llama_cpp"):
        import llama_cpp

        engine = f"llama.cpp-{llama_cpp.__version__}"
    elif module.startswith("fucina.backends.fake") or "fake" in type(llm.model).__name__.lower():
        engine = "fake"
    else:
        engine = type(llm.model).__name__.lower()
    return f"fucina-{__version__}-{engine}-{level}"


def create_app(llm: LLM, settings: ServerSettings | None = None) -> FastAPI:
    """The OpenAI-compatible app serving ``llm`` (a :class:`fucina.LLM`) under the id ``llm.name``.

    The worker thread starts with the app's lifespan (uvicorn, or ``TestClient`` as a context
    manager) and stops with it.
    """
    settings = settings if settings is not None else ServerSettings()
    level = llm.level if llm.speculative else "exact"  # plain decoding is its own reference
    metrics = Metrics()
    worker = Worker(llm, settings.max_queue, on_fault=lambda: metrics.add("engine_faults_total", 1))
    if settings.cross_request_tokens and not llm.speculative:
        raise InvalidOption("cross-request indexes feed speculation; this LLM runs with speculation off",
                            param="cross_request_tokens")
    tenants = None
    if settings.cross_request_tokens:
        tenants = TenantIndexes(max_tokens=settings.cross_request_tokens, index_dir=settings.index_dir,
                                fingerprint=tokenizer_fingerprint(llm))
        metrics.gauge("cross_request_bytes", "Bytes the tenants' cross-request indexes hold.", tenants.nbytes)
        metrics.gauge("cross_request_tokens", "Tokens the tenants' cross-request indexes hold.", tenants.n_tokens)
    names = (*settings.served_model_names, str(llm.name))
    state = ServerState(llm, settings, names[0], level, system_fingerprint(llm, level), metrics, worker,
                        tenants, model_ids=names)
    metrics.gauge("queue_depth", "Requests waiting for the worker.", lambda: worker.depth)
    metrics.gauge("busy", "1 while a generation runs.", lambda: int(worker.busy))
    metrics.gauge("prefix_slots", "Saved KV-cache prefix snapshots.", lambda: len(_slots(llm)))
    metrics.gauge("prefix_slot_bytes", "Bytes the prefix snapshots hold.", lambda: sum(b for _, b in _slots(llm)))

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        worker.start()
        try:
            yield
        finally:
            await asyncio.get_running_loop().run_in_executor(None, worker.close)

    app = FastAPI(title="fucina", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.fucina = state
    _install_error_handlers(app)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": state.model_id, "level": state.level, "queue": worker.depth,
                "busy": worker.busy}

    @app.get("/metrics")
    async def metrics_route(request: Request) -> PlainTextResponse:
        authorize(request, settings)
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/v1/models")
    async def models(request: Request) -> JSONResponse:
        authorize(request, settings)
        return json_response(t.ModelList(data=[_card(state, name) for name in state.model_ids]))

    @app.get("/v1/models/{model_id:path}")
    async def model(request: Request, model_id: str) -> JSONResponse:
        authorize(request, settings)
        if not state.serves(model_id):
            raise model_not_found(model_id, state.model_ids)
        return json_response(_card(state, model_id))

    @app.post(CHAT)
    async def chat_completions(request: Request):
        return await _handle(request, state, CHAT)

    @app.post(COMPLETIONS)
    async def completions(request: Request):
        return await _handle(request, state, COMPLETIONS)

    return app


def _slots(llm: LLM) -> list[tuple[int, int]]:
    read = getattr(llm, "prefix_slots", None)
    return read() if read is not None else []


# -- errors ---------------------------------------------------------------------------------------


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def api_error(request: Request, exc: APIError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        return from_validation(exc.errors(), skip=1).response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        message = exc.detail if isinstance(exc.detail, str) else "request failed"
        if exc.status_code == 404:
            message = f"no route {request.method} {request.url.path[:200]}"
        return APIError(exc.status_code, message, code=code, headers=getattr(exc, "headers", None)).response()

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
        return APIError(500, "internal server error", type="server_error", code="internal_error").response()


async def _read_json(request: Request, limit: int) -> dict[str, Any]:
    """The body as a JSON object, at most ``limit`` bytes (Content-Length and the bytes read)."""
    too_large = APIError(413, f"the request body is over the {limit}-byte limit", code="request_too_large")
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            n = int(declared)
        except ValueError:
            raise APIError(400, "invalid Content-Length header", code="invalid_request") from None
        if n > limit:
            raise too_large
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_large
    if not body.strip():
        raise APIError(400, "the request needs a JSON object body", code="invalid_json")
    try:
        obj = json.loads(bytes(body), parse_constant=_no_constant)
    except (ValueError, RecursionError):
        raise APIError(400, "the request body is not valid JSON", code="invalid_json") from None
    if not isinstance(obj, dict):
        raise APIError(400, "the request body must be a JSON object", code="invalid_json")
    return obj


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


async def _handle(request: Request, state: ServerState, endpoint: str) -> Response:
    """One request to ``endpoint`` (chat or completions): authorize, read and translate the body,
    queue the job, and answer with the whole response or its event stream; every error becomes an
    OpenAI envelope, and the client going away cancels the job."""
    t0 = time.perf_counter()
    job: Job | None = None
    try:
        key = authorize(request, state.settings)
        try:
            body = await _read_json(request, state.settings.max_body_bytes)
        except ClientDisconnect:
            raise APIError(CLIENT_CLOSED, "the client closed the connection") from None
        call = translate_request(endpoint, body, state, tenant=tenant_of(key))
        job = Job(call.start, asyncio.get_running_loop())
        try:
            state.worker.submit(job)
        except QueueFull:
            retry = str(state.settings.retry_after_seconds)
            raise APIError(429, "the server is busy: too many requests are waiting; retry later",
                           type="rate_limit_error", code="rate_limit_exceeded", headers={"Retry-After": retry}) from None
        watch = _Watch(request)
        first = await _next(job, watch)
        if first is None:
            raise APIError(CLIENT_CLOSED, "the client closed the connection")
        raise_for(first, call)
    except APIError as exc:
        if job is not None:
            job.cancel()
        state.metrics.request(endpoint, exc.status)
        log.info("%s %d %s (%s)", endpoint, exc.status, exc.code or exc.type, exc.message[:200])
        return exc.response()
    record = Record(state, call, job, t0)
    if call.request.stream:
        return EventStream(event_stream(record), record, media_type="text/event-stream",
                            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    try:
        while True:
            event = await _next(job, watch)
            if event is None:
                record.finish(CLIENT_CLOSED)
                return APIError(CLIENT_CLOSED, "the client closed the connection").response()
            kind, payload = event
            if kind == "chunk":
                record.add(payload)
            elif kind == "done":
                break
            else:
                err = error_for(event)
                record.finish(err.status, err.message)
                return err.response()
    except BaseException:
        job.cancel()
        record.finish(CLIENT_CLOSED)
        raise
    record.finish(200)
    return json_response(record.response())


class _Watch:
    """Checks, at most every :data:`DISCONNECT_POLL` seconds, whether the client is still there."""

    def __init__(self, request: Request) -> None:
        self.request = request
        self.due = time.perf_counter() + DISCONNECT_POLL

    async def gone(self) -> bool:
        now = time.perf_counter()
        if now < self.due:
            return False
        self.due = now + DISCONNECT_POLL
        return await self.request.is_disconnected()


async def _next(job: Job, watch: _Watch) -> tuple[str, Any] | None:
    """The job's next event; None (and the job cancelled) when the client disconnected meanwhile."""
    while True:
        event = await job.channel.get(DISCONNECT_POLL)
        if await watch.gone():
            job.cancel()
            return None
        if event is not None:
            return event


def _card(state: ServerState, name: str) -> t.ModelCard:
    n_ctx = state.llm.context_length
    return t.ModelCard(id=name, created=state.created, max_model_len=n_ctx, context_length=n_ctx)
