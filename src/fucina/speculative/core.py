"""SpeculativeDecoder: draft, verify in one batched forward, commit what plain decoding would.

The losslessness contract (design record §2). Every draft source is deterministic — a one-hot
proposal q — so speculative rejection sampling (Leviathan et al. 2023) degenerates to:

    run the FULL sampler on the target logits of each verified row, in order;
    accept while sample == draft[i]; the first mismatch's sample is the correction token;
    on full acceptance the last row's sample is a free bonus token.

Proof obligations, each with a test in tests/speculative/test_core.py:
 1. One RNG draw per committed token: rows past the first mismatch are never sampled.
 2. Replay equivalence: each committed token is the sampler's pick on the row conditioned on the
    committed prefix (``row_hook`` sees every row that is sampled).
 3. Penalties see the hypothetical prefix: an accepted token enters ``history`` before the next row
    is sampled; rejected drafts never touch it.
 4. The KV cache never keeps an unverified row, also when the forward or the sampler raises.
 5. The gate decides when to speculate, never what is committed.
 6. Drafts are advice: a source that raises while generating (a corrupt index, a bug) is dropped
    for the rest of this decoder's life and decoding goes on with plain steps; what was committed
    stays committed, and nothing the source did can change a later token.

Token ids are compared, never probabilities; temperature <= 0 is the same path (argmax).
This module imports no backend: the model is anything with the :class:`fucina.model_protocol.Model` shape.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from fucina.errors import InvalidOption, NotRewindable
from fucina.generate import CommittedStream
from fucina.sampling import Sampler
from fucina.speculative.costs import CostTable
from fucina.speculative.gate import GateOptions, LaneGate
from fucina.speculative.source import DraftSource
from fucina.speculative.topk import topk_rows

log = logging.getLogger(__name__)

#: Called with (row, position, history) for every row the sampler consumes; for replay tests.
RowHook = Callable[[np.ndarray, int, Sequence[int]], None]


@dataclass(frozen=True)
class SpecOptions:
    """Decoder options. ``gate_enabled=False`` forces speculation on every step (ablation)."""

    gate: GateOptions = field(default_factory=GateOptions)
    gate_enabled: bool = True
    topk: int = 8  # candidates per verified row handed to observe_topk

    def __post_init__(self) -> None:
        if not isinstance(self.gate, GateOptions):
            raise InvalidOption(f"gate must be GateOptions, got {type(self.gate).__name__}")
        if self.topk < 1:
            raise InvalidOption(f"topk must be >= 1, got {self.topk}")


@dataclass
class SpecStats:
    """Counters of one decoder; ``str()`` is the CLI's ``spec:`` line."""

    steps: int = 0
    verifies: int = 0
    plain_steps: int = 0
    drafted: int = 0
    accepted: int = 0
    committed: int = 0
    #: The error that dropped the draft source mid-generation (obligation 6), or None.
    source_fault: str | None = None

    @property
    def tokens_per_step(self) -> float:
        return self.committed / self.steps if self.steps else 0.0

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    def __str__(self) -> str:
        return (
            f"spec: steps={self.steps} committed={self.committed} ({self.tokens_per_step:.2f} tok/step) "
            f"verifies={self.verifies} drafted={self.drafted} accepted={self.accepted} "
            f"({100 * self.acceptance:.0f}% acc)"
        )


class SpeculativeDecoder(CommittedStream):
    """Decode ``model`` with drafts from ``source``; output equals plain decoding with ``sampler``.

    Usage: :meth:`feed` the prompt (and later turns), then iterate :meth:`generate`. State between
    calls: every committed token is in ``history``; all but the last (the *carried* token) are in
    the KV cache.
    """

    def __init__(
        self,
        model,
        source: DraftSource,
        sampler: Sampler,
        options: SpecOptions | None = None,
        *,
        cost_table: CostTable,
        clock: Callable[[], float] | None = None,
        row_hook: RowHook | None = None,
    ) -> None:
        if not getattr(model, "rewindable", True):
            raise NotRewindable(
                "this model's state cannot be rewound (recurrent/hybrid architecture), so rejected drafts "
                "could not be dropped; use plain decoding"
            )
        super().__init__(model)
        self.source = source
        self.sampler = sampler
        self.options = options or SpecOptions()
        # Lanes need the source to say how confident a draft will be; others get the single gate.
        confidence = getattr(source, "confidence", None)
        self._confidence = confidence if callable(confidence) else None
        self.gate = LaneGate(cost_table, self.options.gate, use_lanes=self._confidence is not None)
        self.clock = clock
        self.row_hook = row_hook
        self.stats = SpecStats()

    # -- context -----------------------------------------------------------------------------
    def feed(self, tokens: Sequence[int]) -> list[int]:
        """Append prompt tokens (the same batched prefill as plain decoding); the source learns them."""
        tokens = super().feed(tokens)
        if tokens:
            self.source.observe(tokens)
        return tokens

    def adopt(self, prefix: Sequence[int]) -> None:
        """Start from a cache already holding ``prefix``; the source learns it as if it were fed."""
        super().adopt(prefix)
        if self.history:
            self.source.observe(self.history)

    # -- decoding ----------------------------------------------------------------------------
    def generate(self, max_tokens: int, stop_ids: Iterable[int] = ()) -> Iterator[int]:
        """Yield up to ``max_tokens`` committed tokens, ending after the first token in ``stop_ids``."""
        self._check_generate(max_tokens)
        stops = frozenset(stop_ids)
        left = max_tokens
        while left > 0:
            committed = self._step(left, stops)
            left -= len(committed)
            yield from committed
            if committed[-1] in stops:
                return

    def _step(self, left: int, stops: frozenset[int]) -> list[int]:
        # 0. Right after feed() the first token comes from the prefill row: no forward needed.
        if self._pending is not None:
            row, self._pending = self._pending, None
            return self._commit_plain(row, self.history[-1], forward=False, seconds=None)
        gate = self.gate
        conf = self._advise(self._confidence) if self._confidence is not None else None
        speculate = self.stats.source_fault is None and (gate.should_speculate(conf) or not self.options.gate_enabled)
        # 1. Draft. k drafts + 1 bonus must fit the token budget and the context.
        draft: Sequence[int] = ()
        room = min(left - 1, self.model.context_length - self.model.kv_len - 1)
        if speculate and room >= gate.options.min_draft:
            budget = min(gate.budget(conf), room)
            draft = self._advise(lambda: [int(t) for t in self.source.suggest(self.history, budget)][:budget]) or ()
        if len(draft) < gate.options.min_draft:
            # Fallback: a plain step (it never enters the gate's window).
            t0 = self.clock() if self.clock else None
            row = self.model.forward_step([self._carried])
            seconds = (self.clock() - t0) if t0 is not None else None
            return self._commit_plain(row, self._carried, forward=True, seconds=seconds)
        return self._verify([int(t) for t in draft], left, stops, conf)

    def _advise(self, call: Callable[[], Any]) -> Any:
        """Run one call into the draft source; None, and the source dropped, if it raises (obligation 6)."""
        if self.stats.source_fault is not None:
            return None
        try:
            return call()
        except Exception as exc:  # noqa: BLE001 - any source failure is contained; BaseException is not
            self.stats.source_fault = f"{type(exc).__name__}: {exc}"
            log.warning("draft source failed and is dropped for this generation (output unaffected): %s",
                        self.stats.source_fault)
            return None

    def _commit_plain(self, row: np.ndarray, input_token: int, forward: bool, seconds: float | None) -> list[int]:
        t = self._sample(row)
        if self.source.wants_topk:
            self._advise(lambda: self.source.observe_topk([input_token], topk_rows(row[None, :], self.options.topk)))
        self.history.append(t)
        self._carried = t
        self.stats.steps += 1
        self.stats.plain_steps += 1
        self.stats.committed += 1
        if forward:
            self.gate.record_plain(seconds)
        self._advise(lambda: self.source.observe([t]))
        return [t]

    def _verify(self, draft: list[int], left: int, stops: frozenset[int], conf: int | None) -> list[int]:
        model = self.model
        base = model.kv_len  # committed tokens in the cache; the carried one is not yet
        hist_len = len(self.history)
        committed: list[int] = []
        t0 = self.clock() if self.clock else None
        try:
            # 2. ONE batched forward over [carried, d1..dk]: row i is conditioned on carried + d[:i].
            rows = model.forward_step_all_logits([self._carried, *draft])
            seconds = (self.clock() - t0) if t0 is not None else None
            # 3. Sample rows in order with the full pipeline; accept while sample == draft[i].
            for i in range(len(draft) + 1):
                t = self._sample(rows[i])
                committed.append(t)
                self.history.append(t)  # accepted tokens condition the next row's penalties
                if i == len(draft) or t != draft[i] or t in stops or len(committed) == left:
                    break  # correction, bonus, stop or budget: no later row is sampled
            # Rows 0..j had committed inputs ([carried, *accepted]); recycling learns from those only.
            if self.source.wants_topk:
                n = len(committed)
                self._advise(lambda: self.source.observe_topk([self._carried, *draft][:n],
                                                              topk_rows(rows[:n], self.options.topk)))
        except BaseException:
            # 4. No unverified row survives: drop the whole verify, history back to the step start.
            model.truncate(base)
            del self.history[hist_len:]
            raise
        # 4. Keep carried + accepted drafts; the last committed token becomes the new carried one.
        model.truncate(base + len(committed))
        self._carried = committed[-1]
        s = self.stats
        s.steps += 1
        s.verifies += 1
        s.drafted += len(draft)
        s.accepted += sum(1 for c, d in zip(committed, draft) if c == d)  # a prefix: we broke at the mismatch
        s.committed += len(committed)
        self.gate.record_verify(len(draft), len(committed), seconds, conf)
        self._advise(lambda: self.source.observe(committed))
        return committed

    def _sample(self, row: np.ndarray) -> int:
        if self.row_hook is not None:
            self.row_hook(row, len(self.history), self.history)
        return int(self.sampler.sample(row, self.history))
