"""Responses: the OpenAI bodies of an answer, whole (JSON) or as server-sent events.

A :class:`Record` gathers one accepted request's chunks and builds its response, its SSE lines, the
``usage`` and ``fucina`` blocks; it also records the request in the metrics and writes its log
line, once, however the request ends. :func:`error_for` turns a worker event that is not a chunk
into the OpenAI error it answers.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, AsyncIterator

from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel

from fucina.server import types as t
from fucina.server.errors import APIError, engine_fault, from_fucina
from fucina.server.state import ServerState
from fucina.server.translate import CHAT, LLMCall
from fucina.server.worker import Job
from fucina.tool_calls import assemble

__all__ = ["CLIENT_CLOSED", "EventStream", "Record", "error_for", "event_stream", "json_response", "raise_for",
           "sse_line"]

log = logging.getLogger("fucina.server")

#: The status recorded when the client went away before the answer was complete (nginx's).
CLIENT_CLOSED = 499


def error_for(event: tuple[str, Any]) -> APIError:
    """The error a worker event other than a chunk answers: a fucina validation error (400), an
    engine fault (500), or the worker shutting down (503)."""
    kind, payload = event
    if kind == "error":
        return from_fucina(payload)
    if kind == "fault":
        return engine_fault(str(payload))
    return APIError(503, "the server is shutting down", type="server_error", code="unavailable")


def raise_for(event: tuple[str, Any], call: LLMCall) -> None:
    """Nothing when ``event`` (the job's first) says the generation started; else raise its error."""
    if event[0] != "started":
        err = error_for(event)
        if err.param == "references":  # fucina.LLM's name for what this request sent as two fields
            ext = call.request.fucina
            err.param = "fucina.references" if ext is not None and ext.references else "prediction"
        raise err


class Record:
    """One accepted request: its chunks so far, then the response, the metrics and the log line."""

    def __init__(self, state: ServerState, call: LLMCall, job: Job, t0: float) -> None:
        self.state, self.call, self.job, self.t0 = state, call, job, t0
        self.parts: list[str] = []
        self.deltas: list[Any] = []
        self.last: Any = None
        self.done = False

    def add(self, chunk: Any) -> None:
        if chunk.text:
            self.parts.append(chunk.text)
        self.deltas.extend(getattr(chunk, "tool_calls", ()))
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
            calls = [t.ToolCallBody(id=c.id, function=t.FunctionBody(name=c.name, arguments=c.arguments))
                     for c in assemble(self.deltas)]
            message = t.AssistantMessage(content=text or (None if calls else ""), tool_calls=calls or None)
            return t.ChatCompletionResponse(
                **self.head(), choices=[t.ChatChoice(message=message, finish_reason=finish)],
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
        return sse_line(body, self.call.request.include_usage)

    def tool_chunk(self, deltas: Any) -> str:
        """One SSE ``data:`` line of tool-call deltas (OpenAI's shape: the first piece of a call carries
        its ``id``, ``type`` and ``function.name``, the later ones ``function.arguments`` only)."""
        items = []
        for d in deltas:
            if d.id is not None:
                items.append({"index": d.index, "id": d.id, "type": "function",
                              "function": {"name": d.name or "", "arguments": d.arguments}})
            else:
                items.append({"index": d.index, "function": {"arguments": d.arguments}})
        body = t.ChatCompletionChunk(**self.head(), choices=[t.ChatChunkChoice(delta={"tool_calls": items})])
        return sse_line(body, self.call.request.include_usage)

    def usage_chunk(self) -> str:
        cls = t.ChatCompletionChunk if self.call.endpoint == CHAT else t.CompletionResponse
        return sse_line(cls(**self.head(), choices=[], usage=self.usage()), True)

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


async def event_stream(record: Record) -> AsyncIterator[str]:
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
            if getattr(payload, "tool_calls", ()):
                yield record.tool_chunk(payload.tool_calls)
        elif kind == "done":
            break
        else:
            err = error_for(event)
            record.finish(err.status, err.message)
            yield f"data: {json.dumps(err.body())}\n\n"
            return
    yield record.chunk(finish=record.last.finish_reason)
    if record.call.request.include_usage:
        yield record.usage_chunk()
    record.finish(200)  # the answer is complete
    yield "data: [DONE]\n\n"


class EventStream(StreamingResponse):
    """A streaming response that cancels its job however it ends (a client disconnect included)."""

    def __init__(self, content: Any, record: Record, **kw: Any) -> None:
        super().__init__(content, **kw)
        self._record = record

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._record.job.cancel()
            self._record.finish(CLIENT_CLOSED)  # a no-op when the stream ended normally


def sse_line(body: BaseModel, include_usage: bool) -> str:
    """``body`` as one SSE ``data:`` line; an absent ``fucina`` block is left out, and so is an
    absent ``usage`` unless the client asked for usage (then every chunk carries ``usage: null``)."""
    data = body.model_dump(mode="json")
    if data.get("fucina") is None:
        data.pop("fucina", None)
    if data.get("usage") is None and not include_usage:
        data.pop("usage", None)
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


def json_response(body: BaseModel, status: int = 200) -> JSONResponse:
    """``body`` as a JSON response."""
    return JSONResponse(body.model_dump(mode="json"), status_code=status)
