"""A chat call's chunks with tools: content and tool-call deltas, and the whole answer from them.

:func:`tool_chunks` runs :class:`~fucina.tool_calls.parse.HermesParser` over a call's text chunks:
every chunk keeps its ``token_ids`` (the tokens are what they were), its ``text`` becomes the content
outside the calls, and its ``tool_calls`` the new call deltas; the last chunk's ``finish_reason`` is
``tool_calls`` when the answer ended by itself after a complete call. :func:`collect` joins them into
the :class:`~fucina.results.Completion` a non-streamed call returns.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterator

from fucina.results import Completion, CompletionChunk, ToolCallDelta
from fucina.tool_calls.parse import HermesParser, assemble

__all__ = ["collect", "tool_chunks"]


def tool_chunks(chunks: Iterator[CompletionChunk], parser: HermesParser | None = None) -> Iterator[CompletionChunk]:
    """``chunks`` (one call's, in order) with their text split into content and tool-call deltas."""
    parser = parser if parser is not None else HermesParser()
    try:
        for chunk in chunks:
            content, deltas = parser.feed(chunk.text)
            if chunk.finish_reason is None:
                if content or deltas or chunk.token_ids:
                    yield CompletionChunk(content, chunk.token_ids, tool_calls=tuple(deltas))
                continue
            rest, more = parser.finish()
            finish = "tool_calls" if parser.called and chunk.finish_reason == "stop" else chunk.finish_reason
            yield replace(chunk, text=content + rest, tool_calls=tuple(deltas + more), finish_reason=finish)
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


def collect(chunks: Iterator[CompletionChunk]) -> Completion:
    """The whole answer of a call's chunks (tool-call deltas, when they came through :func:`tool_chunks`,
    assembled into calls; logprob entries joined)."""
    parts: list[str] = []
    ids: list[int] = []
    deltas: list[ToolCallDelta] = []
    lps: list | None = None
    last = None
    for c in chunks:
        parts.append(c.text)
        ids.extend(c.token_ids)
        deltas.extend(c.tool_calls)
        if c.logprobs is not None:
            lps = (lps or []) + list(c.logprobs)
        last = c
    assert last is not None and last.usage is not None and last.timings is not None
    return Completion("".join(parts), tuple(ids), last.finish_reason or "length", last.usage, last.timings,
                      last.stats, logprobs=None if lps is None else tuple(lps), tool_calls=assemble(deltas))
