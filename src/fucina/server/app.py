"""The FastAPI application: ``create_app(llm, settings)``; all state lives on ``app.state.fucina``.

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
import hashlib
import hmac
import json
import logging
import secrets
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from fucina import __version__
from fucina.errors import ContextLengthExceeded, InvalidOption
from fucina.server import types as t
from fucina.server.errors import APIError, engine_fault, from_fucina, from_validation
from fucina.server.metrics import Metrics
from fucina.server.settings import ServerSettings
from fucina.server.worker import Job, QueueFull, Worker
from fucina.speculative.crossreq import TenantIndexes

log = logging.getLogger("fucina.server")

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
#: How often a non-streaming request checks whether its client is still there (seconds).
DISCONNECT_POLL = 0.25
#: The status recorded when the client went away before the answer was complete (nginx's).
CLIENT_CLOSED = 499


@dataclass
class ServerState:
    """What the routes share (``app.state.fucina``)."""

    llm: Any
    settings: ServerSettings
    model_id: str
    level: str
    fingerprint: str
    metrics: Metrics
    worker: Worker
    #: Per-tenant cross-request indexes (None when ``cross_request_tokens`` is 0).
    tenants: TenantIndexes | None = None
    created: int = field(default_factory=lambda: int(time.time()))


def system_fingerprint(llm, level: str) -> str:
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


#: Text whose token ids tell one tokenizer from another (the persisted indexes hold token ids).
_PROBE = "Fucina's probe: naïve café, 1234567890, def f(x): return x ** 2  # €\n\t"


def tokenizer_fingerprint(llm) -> str:
    """Identifies the tokenizer a persisted cross-request index was written with: the model's name,
    vocabulary size and the ids of a probe text. A file with another fingerprint is never loaded."""
    ids = llm.tokenize(_PROBE, add_bos=False)
    digest = hashlib.sha256(" ".join(map(str, ids)).encode()).hexdigest()[:16]
    return f"{llm.name}|vocab={llm.model.vocab_size}|probe={digest}"


def create_app(llm, settings: ServerSettings | None = None) -> FastAPI:
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
    state = ServerState(llm, settings, str(llm.name), level, system_fingerprint(llm, level), metrics, worker,
                        tenants)
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
        _authorize(request, settings)
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/v1/models")
    async def models(request: Request) -> JSONResponse:
        _authorize(request, settings)
        return _json(t.ModelList(data=[_card(state)]))

    @app.get("/v1/models/{model_id:path}")
    async def model(request: Request, model_id: str) -> JSONResponse:
        _authorize(request, settings)
        if model_id != state.model_id:
            raise _model_not_found(model_id, state)
        return _json(_card(state))

    @app.post(CHAT)
    async def chat_completions(request: Request):
        return await _handle(request, state, CHAT)

    @app.post(COMPLETIONS)
    async def completions(request: Request):
        return await _handle(request, state, COMPLETIONS)

    return app


def _slots(llm) -> list[tuple[int, int]]:
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


def _authorize(request: Request, settings: ServerSettings) -> str | None:
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


def _model_not_found(model: str, state: ServerState) -> APIError:
    return APIError(404, f"the model {model[:256]!r} does not exist; this server serves {state.model_id!r}",
                    param="model", code="model_not_found")


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


# -- requests -------------------------------------------------------------------------------------


@dataclass
class _Call:
    """One validated request, ready for the worker."""

    endpoint: str
    request: t.ChatCompletionRequest | t.CompletionRequest
    start: Callable[[], Iterator[Any]]
    seed: int
    #: The prediction is the request's first reference document (``ref0``).
    prediction: bool
    created: int
    id: str
    #: The request asked for per-source stats (``"fucina": {"stats": true}``).
    stats: bool = False


def _parse(endpoint: str, body: dict[str, Any], state: ServerState, tenant: str = "default") -> _Call:
    model_cls = t.ChatCompletionRequest if endpoint == CHAT else t.CompletionRequest
    try:
        req = model_cls.model_validate(body)
    except ValidationError as exc:
        raise from_validation(exc.errors(include_url=False)) from None
    if req.model is not None and req.model != state.model_id:
        raise _model_not_found(req.model, state)
    settings, llm = state.settings, state.llm
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
        messages = [{"role": m.role, "content": m.content} for m in req.messages]

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
    return _Call(endpoint, req, start, seed, prediction, int(time.time()), prefix + secrets.token_hex(12),
                 stats=bool(ext is not None and ext.stats))


async def _handle(request: Request, state: ServerState, endpoint: str):
    t0 = time.perf_counter()
    job: Job | None = None
    try:
        key = _authorize(request, state.settings)
        try:
            body = await _read_json(request, state.settings.max_body_bytes)
        except ClientDisconnect:
            raise APIError(CLIENT_CLOSED, "the client closed the connection") from None
        call = _parse(endpoint, body, state, TenantIndexes.tenant_of(key))
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
        _raise_for(first, call)
    except APIError as exc:
        if job is not None:
            job.cancel()
        state.metrics.request(endpoint, exc.status)
        log.info("%s %d %s (%s)", endpoint, exc.status, exc.code or exc.type, exc.message[:200])
        return exc.response()
    record = _Record(state, call, job, t0)
    if call.request.stream:
        return _EventStream(_sse(record), record, media_type="text/event-stream",
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
                err = _error_for(event)
                record.finish(err.status, err.message)
                return err.response()
    except BaseException:
        job.cancel()
        record.finish(CLIENT_CLOSED)
        raise
    record.finish(200)
    return _json(record.response())


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


def _error_for(event: tuple[str, Any]) -> APIError:
    kind, payload = event
    if kind == "error":
        return from_fucina(payload)
    if kind == "fault":
        return engine_fault(str(payload))
    return APIError(503, "the server is shutting down", type="server_error", code="unavailable")


def _raise_for(event: tuple[str, Any], call: _Call) -> None:
    if event[0] != "started":
        err = _error_for(event)
        if err.param == "references":  # fucina.LLM's name for what this request sent as two fields
            ext = call.request.fucina
            err.param = "fucina.references" if ext is not None and ext.references else "prediction"
        raise err


class _Record:
    """One accepted request: its chunks so far, then the response, the metrics and the log line."""

    def __init__(self, state: ServerState, call: _Call, job: Job, t0: float) -> None:
        self.state, self.call, self.job, self.t0 = state, call, job, t0
        self.parts: list[str] = []
        self.last: Any = None
        self.done = False

    def add(self, chunk: Any) -> None:
        if chunk.text:
            self.parts.append(chunk.text)
        if chunk.finish_reason is not None:
            self.last = chunk

    # -- response pieces ----------------------------------------------------------------------

    def usage(self) -> t.UsageBody:
        u = self.last.usage
        accepted = rejected = 0
        stats = self.last.stats
        if self.call.prediction and stats is not None:
            try:
                ref = stats.source("ref0")
                accepted, rejected = ref.accepted, ref.drafted - ref.accepted
            except KeyError:
                pass
        return t.UsageBody(
            prompt_tokens=u.prompt_tokens, completion_tokens=u.completion_tokens, total_tokens=u.total_tokens,
            prompt_tokens_details=t.PromptTokensDetails(cached_tokens=u.cached_tokens),
            completion_tokens_details=t.CompletionTokensDetails(accepted_prediction_tokens=accepted,
                                                                rejected_prediction_tokens=rejected))

    def info(self) -> t.FucinaInfo:
        last, state = self.last, self.state
        tm, s = last.timings, last.stats
        spec: dict[str, Any] = {} if s is None else dict(
            steps=s.steps, verifies=s.verifies, drafted=s.drafted, accepted=s.accepted, committed=s.committed,
            acceptance=round(s.acceptance, 4))
        if self.call.stats and s is not None:
            spec.update(gate=s.policy, sources=[t.SourceStats(name=r.name, drafted=r.drafted, accepted=r.accepted)
                                              for r in s.sources])
        if s is not None and s.source_fault is not None:
            spec.update(source_fault=s.source_fault)
        return t.FucinaInfo(seed=self.call.seed, level=state.level, speculative=s is not None,
                            queue_seconds=round(self.job.queue_seconds, 6), prompt_seconds=round(tm.prompt_seconds, 6),
                            first_token_seconds=round(tm.first_token_seconds, 6),
                            generate_seconds=round(tm.generate_seconds, 6),
                            tokens_per_second=round(tm.tokens_per_second, 3), **spec)

    def head(self) -> dict[str, Any]:
        return dict(id=self.call.id, created=self.call.created, model=self.state.model_id,
                    system_fingerprint=self.state.fingerprint)

    def response(self) -> BaseModel:
        text, finish = "".join(self.parts), self.last.finish_reason
        if self.call.endpoint == CHAT:
            return t.ChatCompletionResponse(
                **self.head(), choices=[t.ChatChoice(message=t.AssistantMessage(content=text), finish_reason=finish)],
                usage=self.usage(), fucina=self.info())
        return t.CompletionResponse(**self.head(), choices=[t.CompletionChoice(text=text, finish_reason=finish)],
                                    usage=self.usage(), fucina=self.info())

    def chunk(self, text: str | None = None, *, role: bool = False, finish: str | None = None) -> str:
        """One SSE ``data:`` line of a content delta, the role (first) or the finish reason (last)."""
        extra: dict[str, Any] = {}
        if finish is not None:
            extra["fucina"] = self.info()
        if self.call.endpoint == CHAT:
            delta = {"role": "assistant", "content": ""} if role else ({} if text is None else {"content": text})
            body: BaseModel = t.ChatCompletionChunk(**self.head(), choices=[
                t.ChatChunkChoice(delta=delta, finish_reason=finish)], **extra)
        else:
            body = t.CompletionResponse(**self.head(), choices=[t.CompletionChoice(text=text or "", finish_reason=finish)],
                                        **extra)
        return _sse_line(body, self.call.request.include_usage)

    def usage_chunk(self) -> str:
        cls = t.ChatCompletionChunk if self.call.endpoint == CHAT else t.CompletionResponse
        return _sse_line(cls(**self.head(), choices=[], usage=self.usage()), True)

    # -- the end ------------------------------------------------------------------------------

    def finish(self, status: int, note: str = "") -> None:
        """Record the request in the metrics and write its log line (once)."""
        if self.done:
            return
        self.done = True
        state, last = self.state, self.last
        state.metrics.request(self.call.endpoint, status)
        if last is None or last.usage is None:
            log.info("%s %d after %.0f ms (%s)", self.call.endpoint, status, 1e3 * (time.perf_counter() - self.t0),
                     note[:200] or ("client gone" if status == CLIENT_CLOSED else "no output"))
            return
        u, tm, s = last.usage, last.timings, last.stats
        drafted, accepted = (s.drafted, s.accepted) if s is not None else (0, 0)
        state.metrics.generation(prompt=u.prompt_tokens, cached=u.cached_tokens, completion=u.completion_tokens,
                                 drafted=drafted, accepted=accepted, ttft=tm.first_token_seconds,
                                 queue_wait=self.job.queue_seconds,
                                 tokens_per_second=tm.tokens_per_second if tm.generated_tokens > 1 else None)
        acc = f" ({100 * s.acceptance:.0f}% acc)" if s is not None and s.drafted else ""
        log.info("%s %d prompt=%d cached=%d completion=%d finish=%s queue=%.0fms ttft=%.0fms %.1f tok/s "
                 "drafted=%d accepted=%d%s stream=%s", self.call.endpoint, status, u.prompt_tokens, u.cached_tokens,
                 u.completion_tokens, last.finish_reason, 1e3 * self.job.queue_seconds, 1e3 * tm.first_token_seconds,
                 tm.tokens_per_second, drafted, accepted, acc, bool(self.call.request.stream))


async def _sse(record: _Record):
    """The event stream: role (chat), deltas, the finish reason, usage (if asked), ``[DONE]``."""
    job = record.job
    if record.call.endpoint == CHAT:
        yield record.chunk(role=True)
    while True:
        event = await job.channel.get()
        kind, payload = event
        if kind == "chunk":
            record.add(payload)
            if payload.text:
                yield record.chunk(payload.text)
        elif kind == "done":
            break
        else:
            err = _error_for(event)
            record.finish(err.status, err.message)
            yield f"data: {json.dumps(err.body())}\n\n"
            return
    yield record.chunk(finish=record.last.finish_reason)
    if record.call.request.include_usage:
        yield record.usage_chunk()
    record.finish(200)  # the answer is complete
    yield "data: [DONE]\n\n"


class _EventStream(StreamingResponse):
    """A streaming response that cancels its job however it ends (a client disconnect included)."""

    def __init__(self, content: Any, record: _Record, **kw: Any) -> None:
        super().__init__(content, **kw)
        self._record = record

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._record.job.cancel()
            self._record.finish(CLIENT_CLOSED)  # a no-op when the stream ended normally


def _sse_line(body: BaseModel, include_usage: bool) -> str:
    data = body.model_dump(mode="json")
    if data.get("fucina") is None:
        data.pop("fucina", None)
    if data.get("usage") is None and not include_usage:
        data.pop("usage", None)
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


def _json(body: BaseModel, status: int = 200) -> JSONResponse:
    return JSONResponse(body.model_dump(mode="json"), status_code=status)


def _card(state: ServerState) -> t.ModelCard:
    return t.ModelCard(id=state.model_id, created=state.created)
