"""Log-probabilities of the tokens a call generates, and of the most likely alternatives.

What is reported is the model's **raw** distribution at each position: a float64 log-softmax, by
log-sum-exp, of the logits row the committed token was sampled from — *before* penalties,
temperature and the top-k/top-p/min-p cuts (what OpenAI and llama.cpp's server report). So the
figures do not depend on the sampling settings, only on the model and the committed prefix; on an
*exact* engine they are bit for bit the same with and without speculation, because every committed
token is sampled from the row plain decoding would have computed.

The decoders call a *commit hook* ``(row, token)`` once per committed token, right after sampling
it (:attr:`fucina.plain.CommittedStream.commit_hook`); a speculative verify samples only the rows
whose tokens it commits, so the hook sees exactly the committed stream. :class:`LogprobRecorder` is
that hook: it computes each token's :class:`~fucina.results.TokenLogprob` while the row is live and
hands them out, aligned with the tokens, as the text loop consumes them (:meth:`LogprobRecorder.take`).
:class:`VisibleLogprobs` keeps, for a client, only the entries of tokens whose text is shown.
"""

from __future__ import annotations

import codecs
from collections import deque
from typing import Any, Iterable, Sequence

import numpy as np

from fucina.errors import InvalidOption
from fucina.results import TokenLogprob, TopLogprob

__all__ = ["MAX_TOP_LOGPROBS", "LogprobRecorder", "VisibleLogprobs", "check_logprobs", "log_softmax",
           "token_logprob", "top_ids", "visible"]

#: Most alternatives a call may ask for per position (OpenAI's limit for ``top_logprobs``).
MAX_TOP_LOGPROBS = 20


def check_logprobs(value: Any, *, param: str = "logprobs", limit: int = MAX_TOP_LOGPROBS) -> int | None:
    """``value`` validated as a number of alternatives: None (off) or an int in ``0..limit``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
        raise InvalidOption(f"{param} must be None (off) or an integer in 0..{limit} (alternatives per token), "
                            f"got {value!r}", param=param)
    return int(value)


def log_softmax(row: np.ndarray) -> np.ndarray:
    """The float64 log-softmax of a logits row: ``x - (m + log(sum(exp(x - m))))``, ``m = max(x)``."""
    x = np.asarray(row, dtype=np.float64)
    return x - _logsumexp(x)


def _logsumexp(x: np.ndarray) -> float:
    m = float(np.max(x))
    if not np.isfinite(m):
        return m  # every logit -inf (or +inf/NaN present): nothing finite to normalize by
    return m + float(np.log(np.sum(np.exp(x - m))))


def top_ids(row: np.ndarray, n: int) -> np.ndarray:
    """Ids of the ``n`` largest entries of ``row``, largest first, ties by lowest id (O(V) partition)."""
    x = np.asarray(row)
    v = x.shape[0]
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    if n >= v:
        cand = np.arange(v)
    else:
        kth = x[np.argpartition(x, v - n)[v - n]]  # the n-th largest value
        above = np.flatnonzero(x > kth)
        ties = np.flatnonzero(x == kth)[: n - above.size]  # lowest ids first among the values at the cut
        cand = np.concatenate([above, ties])
    order = np.lexsort((cand, -x[cand].astype(np.float64)))
    return cand[order].astype(np.int64)


def token_logprob(row: np.ndarray, token: int, top_n: int = 0, *, text_offset: int = 0) -> TokenLogprob:
    """``token``'s log-probability under ``row`` (raw logits) and the ``top_n`` most likely tokens."""
    x = np.asarray(row, dtype=np.float64)
    lse = _logsumexp(x)
    top = tuple(TopLogprob(int(i), float(x[i] - lse)) for i in top_ids(x, top_n))
    return TokenLogprob(int(token), float(x[int(token)] - lse), top, int(text_offset))


class LogprobRecorder:
    """A decoder's commit hook that records each committed token's log-probability.

    ``top_n``: alternatives per position (0..:data:`MAX_TOP_LOGPROBS`). ``stop_ids``: the call's end
    tokens (they add no text, so their ``text_offset`` is the end of the text). Use :meth:`attach` on
    a decoder, then :meth:`take` the entries of the tokens the text loop consumed, in order.
    """

    def __init__(self, model, top_n: int, stop_ids: Iterable[int] = ()) -> None:
        self._model = model
        self.top_n = check_logprobs(top_n) or 0
        self._stop_ids = frozenset(int(t) for t in stop_ids)
        self._pending: deque[TokenLogprob] = deque()
        self._dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._chars = 0

    def attach(self, decoder) -> "LogprobRecorder":
        """Make this the commit hook of ``decoder`` (a plain or speculative decoder)."""
        decoder.commit_hook = self
        return self

    def __call__(self, row: np.ndarray, token: int) -> None:
        self._pending.append(token_logprob(row, token, self.top_n))

    def take(self, token_ids: Sequence[int]) -> tuple[TokenLogprob, ...]:
        """The entries of the next ``token_ids`` committed (in order), with their text offsets."""
        out = []
        for tok in token_ids:
            if not self._pending or self._pending[0].token_id != int(tok):
                raise RuntimeError(f"no logprob recorded for committed token {tok}")  # a decoder bypassed the hook
            e = self._pending.popleft()
            offset = self._chars
            if int(tok) in self._stop_ids:
                offset += len(self._dec.decode(b"", final=True))  # the end token follows every flushed byte
                self._chars = offset
            else:
                self._chars += len(self._dec.decode(self._model.token_bytes(int(tok))))
            out.append(TokenLogprob(e.token_id, e.logprob, e.top, offset))
        return tuple(out)


def visible(entries: Sequence[TokenLogprob], text: str) -> list[TokenLogprob]:
    """The entries whose token shows in ``text`` (the whole call's text): ``text_offset < len(text)``."""
    return [e for e in entries if e.text_offset < len(text)]


class VisibleLogprobs:
    """The streamed form of :func:`visible`: :meth:`push` each chunk's text and entries, get back the
    entries whose text is now shown (an entry whose text is still held back waits for a later chunk;
    the ones never shown are dropped). Over a whole stream it yields exactly :func:`visible`."""

    def __init__(self) -> None:
        self._held: list[TokenLogprob] = []
        self._chars = 0

    def push(self, text: str, entries: Sequence[TokenLogprob] | None) -> list[TokenLogprob]:
        self._chars += len(text)
        held = self._held + list(entries or ())
        n = 0
        while n < len(held) and held[n].text_offset < self._chars:  # offsets never decrease
            n += 1
        out, self._held = held[:n], held[n:]
        return out
