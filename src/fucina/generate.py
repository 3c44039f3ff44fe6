"""Plain generation (the reference every speculative run must equal) and the streaming front end.

:class:`PlainDecoder` has the same ``feed``/``generate`` shape as
:class:`fucina.speculative.core.SpeculativeDecoder`, so callers (CLI, chat, bench) swap one for the
other. :func:`stream` turns either into text chunks plus :class:`GenerationStats`.
"""

from __future__ import annotations

import codecs
import time
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

import numpy as np

from fucina.errors import ContextOverflow, InvalidOption
from fucina.sampling import Sampler


class CommittedStream:
    """State both decoders share, so the prefill path is one piece of code.

    ``history`` holds every committed token; all but the last (the *carried* token) are in the KV
    cache; after :meth:`feed` the prefill's last row waits in ``_pending`` for the first sample.
    """

    def __init__(self, model) -> None:
        self.model = model
        self.history: list[int] = []
        self._carried: int | None = None
        self._pending: np.ndarray | None = None

    def feed(self, tokens: Sequence[int]) -> list[int]:
        """Append prompt tokens in one batched forward (the carried token, if any, goes first)."""
        tokens = [int(t) for t in tokens]
        if tokens:
            batch = tokens if self._carried is None else [self._carried, *tokens]
            self._pending = np.array(self.model.forward_step(batch), copy=True)
            self._carried = None
            self.history.extend(tokens)
        return tokens

    def adopt(self, prefix: Sequence[int]) -> None:
        """Start from a KV cache that already holds exactly ``prefix`` (prefix reuse across calls).

        The caller vouches that the model's first ``kv_len`` cache rows are ``prefix``; the next
        :meth:`feed` appends after them. Only a fresh stream can adopt.
        """
        prefix = [int(t) for t in prefix]
        if self.history or self._pending is not None:
            raise InvalidOption("adopt() needs a fresh stream (nothing fed yet)")
        if self.model.kv_len != len(prefix):
            raise InvalidOption(f"the cache holds {self.model.kv_len} tokens, not the {len(prefix)} adopted")
        self.history.extend(prefix)

    def _check_generate(self, max_tokens: int) -> None:
        if max_tokens < 0:
            raise InvalidOption(f"max_tokens must be >= 0, got {max_tokens}")
        if not self.history:
            raise InvalidOption("feed() a prompt before generate()")


class PlainDecoder(CommittedStream):
    """One forward per token: prefill the prompt in one batch, then ``forward_step([last])``."""

    def __init__(self, model, sampler: Sampler) -> None:
        super().__init__(model)
        self.sampler = sampler

    def generate(self, max_tokens: int, stop_ids: Iterable[int] = ()) -> Iterator[int]:
        """Yield up to ``max_tokens`` tokens, ending after the first token in ``stop_ids``."""
        self._check_generate(max_tokens)
        stops = frozenset(stop_ids)
        for _ in range(max_tokens):
            if self._pending is not None:
                row, self._pending = self._pending, None
            else:
                row = self.model.forward_step([self._carried])
            t = int(self.sampler.sample(row, self.history))
            self.history.append(t)
            self._carried = t
            yield t
            if t in stops:
                return


@dataclass
class GenerationStats:
    """Timing of one generation; prefill and generation are reported separately."""

    prompt_tokens: int = 0
    prompt_seconds: float = 0.0
    generated_tokens: int = 0
    gen_seconds: float = 0.0
    stop_reason: str = ""

    @property
    def prompt_tps(self) -> float:
        return self.prompt_tokens / self.prompt_seconds if self.prompt_seconds > 0 else 0.0

    @property
    def gen_tps(self) -> float:
        return self.generated_tokens / self.gen_seconds if self.gen_seconds > 0 else 0.0

    def __str__(self) -> str:
        return (
            f"prompt: {self.prompt_tokens} tok ({self.prompt_tps:.1f} tok/s)  "
            f"generated: {self.generated_tokens} tok ({self.gen_tps:.1f} tok/s)  stop: {self.stop_reason}"
        )


class TextStreamer:
    """Turns token ids into text chunks, holding back incomplete UTF-8 sequences."""

    def __init__(self, model) -> None:
        self._model = model
        self._dec = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token: int) -> str:
        return self._dec.decode(self._model.token_bytes(token))

    def flush(self) -> str:
        return self._dec.decode(b"", final=True)


class StopScanner:
    """Streams text while withholding anything that could still become a stop string.

    ``push`` returns (text safe to show, whether a stop string completed); on a hit the text is cut
    right before the earliest stop string and nothing after it is ever shown.
    """

    def __init__(self, sequences: Sequence[str]) -> None:
        self._seqs = tuple(sequences)
        self._buf = ""

    def push(self, chunk: str) -> tuple[str, bool]:
        buf = self._buf + chunk
        hits = [i for i in (buf.find(s) for s in self._seqs) if i >= 0]
        if hits:
            self._buf = ""
            return buf[: min(hits)], True
        # Hold back the longest suffix that is a proper prefix of some sequence: a sequence
        # starting there may complete with the next chunk.
        hold = 0
        for s in self._seqs:
            for k in range(min(len(s) - 1, len(buf)), hold, -1):
                if buf.endswith(s[:k]):
                    hold = k
                    break
        self._buf = buf[len(buf) - hold:] if hold else ""
        return buf[: len(buf) - hold], False

    def flush(self) -> str:
        out, self._buf = self._buf, ""
        return out


def run(decoder, prompt: Sequence[int], max_tokens: int, stop_ids: Iterable[int] = (),
        stats: GenerationStats | None = None) -> Iterator[int]:
    """Feed ``prompt``, then yield generated tokens, filling ``stats`` as it goes.

    Stops at a stop id (``stop_reason='stop'``), the budget (``'length'``) or a full context
    (``'context'``: the generation ends cleanly instead of raising).
    """
    stats = stats if stats is not None else GenerationStats()
    stops = frozenset(stop_ids)
    t0 = time.perf_counter()
    decoder.feed(prompt)
    stats.prompt_tokens += len(prompt)
    stats.prompt_seconds += time.perf_counter() - t0
    room = decoder.model.context_length - decoder.model.kv_len
    budget = min(max_tokens, room)
    stats.stop_reason = "length" if budget == max_tokens else "context"
    t1 = time.perf_counter()
    try:
        for t in decoder.generate(budget, stops):
            stats.generated_tokens += 1
            stats.gen_seconds = time.perf_counter() - t1
            yield t
            if t in stops:
                stats.stop_reason = "stop"
    except ContextOverflow:
        stats.stop_reason = "context"
    stats.gen_seconds = time.perf_counter() - t1
