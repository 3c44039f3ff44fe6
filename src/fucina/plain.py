"""Plain generation: the reference every speculative run must equal.

:class:`PlainDecoder` has the same ``feed``/``generate`` shape as
:class:`fucina.speculative.decoder.SpeculativeDecoder`, so callers (LLM, chat, bench) swap one for the
other; :class:`fucina.text.TextLoop` turns either's committed tokens into text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from fucina.errors import InvalidOption
from fucina.sampling import Sampler


#: Called with (row, token) right after each committed token was sampled from ``row`` (its raw logits).
CommitHook = Callable[[np.ndarray, int], None]


class CommittedStream:
    """State both decoders share, so the prefill path is one piece of code.

    ``history`` holds every committed token; all but the last (the *carried* token) are in the KV
    cache; after :meth:`feed` the prefill's last row waits in ``_pending`` for the first sample.

    ``commit_hook`` (None, or a :data:`CommitHook`) is called once per committed token, in order, with
    the raw logits row it was sampled from (e.g. :class:`fucina.logprobs.LogprobRecorder`). It only
    observes: it cannot change what is committed. The row is the engine's buffer: read it in the call.
    """

    def __init__(self, model) -> None:
        self.model = model
        self.commit_hook: CommitHook | None = None
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
            if self.commit_hook is not None:
                self.commit_hook(row, t)
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
