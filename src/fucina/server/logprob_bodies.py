"""The ``logprobs`` bodies of the OpenAI responses, built from :class:`fucina.results.TokenLogprob` entries.

Chat (``choices[i].logprobs.content``): one ``{token, logprob, bytes, top_logprobs}`` object per shown
token, ``top_logprobs`` holding the ``top_logprobs`` most likely tokens (the chosen one may or may not be
among them). Legacy completions: the parallel lists ``tokens``, ``token_logprobs``, ``top_logprobs``
(dicts from a token's text to its log-probability, the chosen token included) and ``text_offset``
(where each token starts in the choice's ``text``). Only tokens whose text shows in the answer are
listed (not the end token, nor text a stop string cut: :func:`fucina.logprobs.visible`). A token's
text is its UTF-8 bytes decoded with replacement characters (``bytes`` keeps them exact); a
log-probability of ``-inf`` is reported as ``-9999.0``, as OpenAI does, since JSON has no infinity.
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

from pydantic import BaseModel, ConfigDict

from fucina.results import TokenLogprob

__all__ = ["ChoiceLogprobs", "CompletionLogprobs", "TokenLogprobBody", "TopLogprobBody", "chat_logprobs",
           "completion_logprobs"]

#: What an impossible token's log-probability is reported as (OpenAI's floor).
FLOOR = -9999.0

TokenBytes = Callable[[int], bytes]


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TopLogprobBody(_Out):
    """One of the most likely tokens at a position: its text, log-probability and UTF-8 bytes."""

    token: str
    logprob: float
    bytes: Optional[list[int]] = None


class TokenLogprobBody(TopLogprobBody):
    """A generated token's entry in ``choices[i].logprobs.content``."""

    top_logprobs: list[TopLogprobBody]


class ChoiceLogprobs(_Out):
    """``choices[i].logprobs`` of a chat answer (or of one streamed delta)."""

    content: Optional[list[TokenLogprobBody]] = None
    refusal: Optional[list[TokenLogprobBody]] = None


class CompletionLogprobs(_Out):
    """``choices[i].logprobs`` of a legacy completion: parallel lists, one entry per shown token.

    ``top_logprobs`` maps each alternative's text (and the chosen token's) to its log-probability;
    ``text_offset`` is where each token's text starts in the choice's ``text`` (characters).
    """

    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


def _lp(x: float) -> float:
    return x if math.isfinite(x) else FLOOR


def _text(token_bytes: TokenBytes, token: int) -> tuple[str, list[int]]:
    raw = token_bytes(token)
    return raw.decode("utf-8", errors="replace"), list(raw)


def _top(token_bytes: TokenBytes, token: int, logprob: float) -> TopLogprobBody:
    text, raw = _text(token_bytes, token)
    return TopLogprobBody(token=text, logprob=_lp(logprob), bytes=raw)


def chat_logprobs(entries: Sequence[TokenLogprob], token_bytes: TokenBytes) -> ChoiceLogprobs:
    """The chat ``logprobs`` object of ``entries`` (the shown tokens of an answer or of one delta)."""
    content = []
    for e in entries:
        text, raw = _text(token_bytes, e.token_id)
        content.append(TokenLogprobBody(token=text, logprob=_lp(e.logprob), bytes=raw,
                                        top_logprobs=[_top(token_bytes, t.token_id, t.logprob) for t in e.top]))
    return ChoiceLogprobs(content=content)


def completion_logprobs(entries: Sequence[TokenLogprob], token_bytes: TokenBytes) -> CompletionLogprobs:
    """The legacy ``logprobs`` object of ``entries`` (a streamed chunk's too: its ``text_offset`` values
    count from the start of the choice's whole text)."""
    tokens, lps, tops, offsets = [], [], [], []
    for e in entries:
        tokens.append(_text(token_bytes, e.token_id)[0])
        lps.append(_lp(e.logprob))
        top: dict[str, float] = {}
        for t in e.top:  # most likely first: the first token with a given text keeps its entry
            top.setdefault(_text(token_bytes, t.token_id)[0], _lp(t.logprob))
        top.setdefault(tokens[-1], lps[-1])
        tops.append(top)
        offsets.append(e.text_offset)
    return CompletionLogprobs(tokens=tokens, token_logprobs=lps, top_logprobs=tops, text_offset=offsets)
