"""Responses: the OpenAI bodies of an answer, whole (JSON) or as server-sent events.

A :class:`Record` gathers one accepted request's chunks (of each of its ``n`` choices) and builds its
response, its SSE lines, the ``usage`` and ``fucina`` blocks; it also records the request in the
metrics and writes its log line, once, however the request ends. With several choices ``usage``
counts the prompt once and the completion tokens of every choice; the ``fucina`` block sums what
the generations did (a greedy request's copies did nothing). :func:`error_for` turns a worker event that is not a chunk
into the OpenAI error it answers.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, AsyncIterator

from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel

from fucina.logprobs import VisibleLogprobs
from fucina.results import SourceReport, SpeculationReport, Timings, TokenLogprob, Usage
from fucina.server import types as t
from fucina.server.errors import APIError, engine_fault, from_fucina
from fucina.server.logprob_bodies import chat_logprobs, completion_logprobs
from fucina.server.state import ServerState
from fucina.server.translate import CHAT, ChoiceChunk, LLMCall
from fucina.server.worker import Job
from fucina.tool_calls import assemble

__all__ = ["CLIENT_CLOSED", "EventStream", "Record", "error_for", "event_stream", "json_response", "raise_for",
           "sse_line"]

log = logging.getLogger("fucina.server")

#: The status recorded when the client went away before the answer was complete (nginx's).
CLIENT_CLOSED = 499


def error_for(event: tuple[str, Any], *, chat: bool = True) -> APIError:
    """The error a worker event other than a chunk answers: a fucina validation error (400), an
    engine fault (500), or the worker shutting down (503). ``chat``: the request came to the chat endpoint."""
    kind, payload = event
    if kind == "error":
        return from_fucina(payload, chat=chat)
    if kind == "fault":
        return engine_fault(str(payload))
    return APIError(503, "the server is shutting down", type="server_error", code="unavailable")


def raise_for(event: tuple[str, Any], call: LLMCall) -> None:
    """Nothing when ``event`` (the job's first) says the generation started; else raise its error."""
    if event[0] != "started":
        err = error_for(event, chat=call.endpoint == CHAT)
        if err.param == "references":  # fucina.LLM's name for what this request sent as two fields
            ext = call.request.fucina
            err.param = "fucina.references" if ext is not None and ext.references else "prediction"
        raise err


class Choice:
    """One choice's text so far, its final chunk, and the logprob entries of its shown tokens."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.last: Any = None
        self.entries: list[TokenLogprob] = []
        self.window = VisibleLogprobs()
        #: Its tool-call deltas so far (a chat with tools).
        self.deltas: list[Any] = []
        self.announced = False  # its role delta was sent (chat streams)


class Record:
    """One accepted request: its chunks so far, then the response, the metrics and the log line."""

    def __init__(self, state: ServerState, call: LLMCall, job: Job, t0: float) -> None:
        self.state, self.call, self.job, self.t0 = state, call, job, t0
        self.choices = [Choice() for _ in range(call.n)]
        #: The final chunks of the choices that were generated (a greedy request's copies are not).
        self.runs: list[Any] = []
        self.done = False

    def add(self, item: ChoiceChunk) -> list[TokenLogprob]:
        """Take one chunk of a choice; returns the logprob entries whose text it shows."""
        choice, chunk = self.choices[item.index], item.chunk
        if chunk.text:
            choice.parts.append(chunk.text)
        shown = choice.window.push(chunk.text, chunk.logprobs) if self.call.logprobs is not None else []
        choice.entries.extend(shown)
        choice.deltas.extend(getattr(chunk, "tool_calls", ()))
        if chunk.finish_reason is not None:
            choice.last = chunk
            if not item.copy:
                self.runs.append(chunk)
        return shown

    @property
    def last(self) -> Any:
        """The last choice's final chunk (None until the answer is complete)."""
        return self.choices[-1].last

    # -- totals over the choices --------------------------------------------------------------

    def totals(self) -> tuple[Usage, Timings, SpeculationReport | None] | None:
        """The request's usage, timings and speculation over its finished choices (None: none finished)."""
        done = [c.last for c in self.choices if c.last is not None]
        if not self.runs or not done:
            return None
        first = self.runs[0]
        usage = Usage(first.usage.prompt_tokens, sum(c.usage.completion_tokens for c in done),
                      first.usage.cached_tokens)
        tms = [r.timings for r in self.runs]
        timings = Timings(tms[0].prompt_seconds, tms[0].first_token_seconds, sum(x.generate_seconds for x in tms),
                          sum(x.generated_tokens for x in tms))
        return usage, timings, _merged_stats([r.stats for r in self.runs])

    # -- response pieces ----------------------------------------------------------------------

    def usage(self) -> t.UsageBody:
        u, _, stats = self.totals()
        accepted = rejected = 0
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
        state = self.state
        _, tm, s = self.totals()
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
        return dict(id=self.call.id, created=self.call.created, model=self.call.model or self.state.model_id,
                    system_fingerprint=self.state.fingerprint)

    def _logprobs(self, entries: list[TokenLogprob] | None) -> Any:
        if self.call.logprobs is None or entries is None:
            return None
        token_bytes = self.state.llm.model.token_bytes
        if self.call.endpoint == CHAT:
            return chat_logprobs(entries, token_bytes)
        return completion_logprobs(entries, token_bytes)

    def response(self) -> BaseModel:
        choices: list[Any] = []
        for i, c in enumerate(self.choices):
            text, finish, lp = "".join(c.parts), c.last.finish_reason, self._logprobs(c.entries)
            if self.call.endpoint == CHAT:
                calls = [t.ToolCallBody(id=k.id, function=t.FunctionBody(name=k.name, arguments=k.arguments))
                         for k in assemble(c.deltas)]
                message = t.AssistantMessage(content=text or (None if calls else ""), tool_calls=calls or None)
                choices.append(t.ChatChoice(index=i, message=message, finish_reason=finish, logprobs=lp))
            else:
                choices.append(t.CompletionChoice(text=text, index=i, finish_reason=finish, logprobs=lp))
        cls = t.ChatCompletionResponse if self.call.endpoint == CHAT else t.CompletionResponse
        return cls(**self.head(), choices=choices, usage=self.usage(), fucina=self.info())

    def chunk(self, text: str | None = None, *, index: int = 0, role: bool = False, finish: str | None = None,
              logprobs: list[TokenLogprob] | None = None) -> str:
        """One SSE ``data:`` line of choice ``index``: a content delta (with the logprobs of the tokens
        it shows), the role (first) or the finish reason (last; the request's last one carries the
        ``fucina`` block)."""
        extra: dict[str, Any] = {}
        if finish is not None and index == len(self.choices) - 1:
            extra["fucina"] = self.info()
        lp = self._logprobs(logprobs)
        if self.call.endpoint == CHAT:
            delta = {"role": "assistant", "content": ""} if role else ({} if text is None else {"content": text})
            body: BaseModel = t.ChatCompletionChunk(**self.head(), choices=[
                t.ChatChunkChoice(index=index, delta=delta, finish_reason=finish, logprobs=lp)], **extra)
        else:
            body = t.CompletionResponse(**self.head(), choices=[
                t.CompletionChoice(text=text or "", index=index, finish_reason=finish, logprobs=lp)], **extra)
        return sse_line(body, self.call.request.include_usage)

    def tool_chunk(self, deltas: Any, *, index: int = 0) -> str:
        """One SSE ``data:`` line of tool-call deltas (OpenAI's shape: the first piece of a call carries
        its ``id``, ``type`` and ``function.name``, the later ones ``function.arguments`` only)."""
        items = []
        for d in deltas:
            if d.id is not None:
                items.append({"index": d.index, "id": d.id, "type": "function",
                              "function": {"name": d.name or "", "arguments": d.arguments}})
            else:
                items.append({"index": d.index, "function": {"arguments": d.arguments}})
        body = t.ChatCompletionChunk(**self.head(), choices=[t.ChatChunkChoice(index=index,
                                                                               delta={"tool_calls": items})])
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
        state, totals = self.state, self.totals()
        state.metrics.request(self.call.endpoint, status)
        if totals is None:
            log.info("%s %d after %.0f ms (%s)", self.call.endpoint, status, 1e3 * (time.perf_counter() - self.t0),
                     note[:200] or ("client gone" if status == CLIENT_CLOSED else "no output"))
            return
        u, tm, s = totals
        finish = ",".join(c.last.finish_reason for c in self.choices if c.last is not None)
        drafted, accepted = (s.drafted, s.accepted) if s is not None else (0, 0)
        state.metrics.generation(prompt=u.prompt_tokens, cached=u.cached_tokens, completion=u.completion_tokens,
                                 drafted=drafted, accepted=accepted, ttft=tm.first_token_seconds,
                                 queue_wait=self.job.queue_seconds,
                                 tokens_per_second=tm.tokens_per_second if tm.generated_tokens > 1 else None)
        acc = f" ({100 * s.acceptance:.0f}% acc)" if s is not None and s.drafted else ""
        log.info("%s %d prompt=%d cached=%d completion=%d finish=%s queue=%.0fms ttft=%.0fms %.1f tok/s "
                 "drafted=%d accepted=%d%s stream=%s", self.call.endpoint, status, u.prompt_tokens, u.cached_tokens,
                 u.completion_tokens, finish, 1e3 * self.job.queue_seconds, 1e3 * tm.first_token_seconds,
                 tm.tokens_per_second, drafted, accepted, acc, bool(self.call.request.stream))


async def event_stream(record: Record) -> AsyncIterator[str]:
    """The event stream: per choice (one after another, each chunk with its ``index``) the role (chat),
    the deltas and the finish reason; then usage (if asked) and ``[DONE]``."""
    job, chat, last = record.job, record.call.endpoint == CHAT, len(record.choices) - 1
    if chat:
        record.choices[0].announced = True
        yield record.chunk(role=True)
    while True:
        event = await job.channel.get()
        kind, payload = event
        if kind == "chunk":
            i, chunk = payload.index, payload.chunk
            if chat and not record.choices[i].announced:
                record.choices[i].announced = True
                yield record.chunk(index=i, role=True)
            shown = record.add(payload)
            if chunk.text:
                yield record.chunk(chunk.text, index=i, logprobs=shown)
            if getattr(chunk, "tool_calls", ()):
                yield record.tool_chunk(chunk.tool_calls, index=i)
            if chunk.finish_reason is not None and i < last:
                yield record.chunk(index=i, finish=chunk.finish_reason)
        elif kind == "done":
            break
        else:
            err = error_for(event)
            record.finish(err.status, err.message)
            yield f"data: {json.dumps(err.body())}\n\n"
            return
    yield record.chunk(index=last, finish=record.last.finish_reason)
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


def _merged_stats(reports: list[SpeculationReport | None]) -> SpeculationReport | None:
    """One report of several generations: counters and per-source tokens summed, the last policy state."""
    if not reports or reports[0] is None:
        return None
    if len(reports) == 1:
        return reports[0]
    rs = [r for r in reports if r is not None]
    sources: dict[str, list[int]] = {}
    for r in rs:
        for src in r.sources:
            acc = sources.setdefault(src.name, [0, 0])
            acc[0] += src.drafted
            acc[1] += src.accepted
    return SpeculationReport(
        sum(r.steps for r in rs), sum(r.verifies for r in rs), sum(r.drafted for r in rs),
        sum(r.accepted for r in rs), sum(r.committed for r in rs), rs[-1].policy,
        tuple(SourceReport(name, d, a) for name, (d, a) in sources.items()), rs[0].level,
        source_fault=next((r.source_fault for r in rs if r.source_fault is not None), None))


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
