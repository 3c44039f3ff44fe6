"""SpeculativeDecoder: draft, verify in one batched forward, commit what plain decoding would.

The losslessness contract (docs/design.md §2). Every draft source is deterministic — a one-hot
proposal q — so speculative rejection sampling (Leviathan et al. 2023) degenerates to:

    run the FULL sampler on the target logits of each verified row, in order;
    accept while sample == draft[i]; the first mismatch's sample is the correction token;
    on full acceptance the last row's sample is a free bonus token.

Glossary (one verify of a k-token draft commits between 1 and k + 1 tokens):
 * accepted — a draft token the sampler picked too, on the row conditioned on everything before it;
 * correction — the sampler's pick on the row of the first rejected draft token (it replaces it);
 * bonus — the sampler's pick on the row after the last draft token, when all k were accepted.

Proof obligations, each with a test in tests/speculative/test_decoder.py:
 1. One RNG draw per committed token: rows past the first mismatch are never sampled.
 2. Replay equivalence: each committed token is the sampler's pick on the row conditioned on the
    committed prefix (``row_hook`` sees every row that is sampled).
 3. Penalties see the hypothetical prefix: an accepted token enters ``history`` before the next row
    is sampled; rejected drafts never touch it.
 4. The KV cache never keeps an unverified row, also when the forward or the sampler raises.
 5. The policy decides when to verify and how long, never what is committed.
 6. Drafts are advice: a source that raises while generating (a corrupt index, a bug) is dropped
    for the rest of this decoder's life and decoding goes on with plain steps; what was committed
    stays committed, and nothing the source did can change a later token.

Token ids are compared, never probabilities; temperature <= 0 is the same path (argmax).
This module imports no backend: the model is anything with the :class:`fucina.model_protocol.Model` shape;
the source anything with the :class:`fucina.speculative.source.DraftSource` shape, which offers one
:class:`~fucina.speculative.source.Draft` per step.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from fucina.errors import InvalidOption, NotRewindable
from fucina.model_protocol import Model
from fucina.plain import CommittedStream
from fucina.results import SpeculationRates
from fucina.sampling import Sampler
from fucina.speculative.costs import CostTable
from fucina.speculative.policy import AcceptanceModel, DraftPolicy, PolicyOptions, WordPieces
from fucina.speculative.source import NO_DRAFT, DraftSource, observe_fed
from fucina.speculative.topk import topk_rows

log = logging.getLogger(__name__)

#: Called with (row, position, history) for every row the sampler consumes; for replay tests.
RowHook = Callable[[np.ndarray, int, Sequence[int]], None]


@dataclass(frozen=True)
class SpecOptions:
    """Decoder options. ``verify_all=True`` verifies every candidate of >= min_draft tokens instead
    of the policy's choice (the bench's ``gate_open`` ablation); the policy still scores them.
    ``grammar_drafts=False`` keeps a constrained generation's forced tokens out of the drafts (the
    structured-output bench's ablation; :class:`~fucina.speculative.grammar_drafts.GrammarDrafts`)."""

    policy: PolicyOptions = field(default_factory=PolicyOptions)
    verify_all: bool = False
    grammar_drafts: bool = True
    topk: int = 8  # candidates per verified row handed to observe_topk

    def __post_init__(self) -> None:
        if not isinstance(self.policy, PolicyOptions):
            raise InvalidOption(f"policy must be PolicyOptions, got {type(self.policy).__name__}")
        if self.topk < 1:
            raise InvalidOption(f"topk must be >= 1, got {self.topk}")


@dataclass
class SpecStats(SpeculationRates):
    """Counters of one decoder; ``str()`` is the CLI's ``spec:`` line."""

    steps: int = 0
    verifies: int = 0
    plain_steps: int = 0
    drafted: int = 0
    accepted: int = 0
    committed: int = 0
    #: The error that dropped the draft source mid-generation (obligation 6), or None.
    source_fault: str | None = None
    #: Forwards by rows fed (1 = a plain step, k + 1 = a verify of k drafts): rows -> [count, seconds].
    #: Seconds add up only with a clock; the bench sets them beside the cost table to see what a verify
    #: costs in place, where the table was measured on a short calibration prompt.
    forwards: dict[int, list[float]] = field(default_factory=dict)

    def record_forward(self, rows: int, seconds: float | None) -> None:
        entry = self.forwards.setdefault(rows, [0, 0.0])
        entry[0] += 1
        entry[1] += seconds or 0.0


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
        model: Model,
        source: DraftSource,
        sampler: Sampler,
        options: SpecOptions | None = None,
        *,
        cost_table: CostTable,
        clock: Callable[[], float] | None = None,
        row_hook: RowHook | None = None,
        acceptance: AcceptanceModel | None = None,
    ) -> None:
        if not model.rewindable:
            raise NotRewindable(
                "this model's state cannot be rewound (recurrent/hybrid architecture), so rejected drafts "
                "could not be dropped; use plain decoding"
            )
        super().__init__(model)
        self.source = source
        self.sampler = sampler
        self.options = options or SpecOptions()
        # ``acceptance``: what earlier generations learned of the sources (None: start from the priors).
        # Word pieces come from the model's tokenizer.
        self.policy = DraftPolicy(cost_table, self.options.policy, acceptance=acceptance,
                                  sampled=not sampler.options.greedy, pieces=WordPieces(model.token_bytes))
        self.clock = clock
        self.row_hook = row_hook
        self.stats = SpecStats()

    # -- context -----------------------------------------------------------------------------
    def feed(self, tokens: Sequence[int]) -> list[int]:
        """Append prompt tokens (the same batched prefill as plain decoding); the source learns them."""
        tokens = super().feed(tokens)
        self.policy.reset_pending()  # candidates predict the model's continuation, not a new turn
        if tokens:
            observe_fed(self.source, tokens)
        return tokens

    def adopt(self, prefix: Sequence[int]) -> None:
        """Start from a cache already holding ``prefix``; the source learns it as if it were fed."""
        super().adopt(prefix)
        self.policy.reset_pending()
        if self.history:
            observe_fed(self.source, self.history)

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
        policy, o = self.policy, self.options.policy
        # 1. Candidate: up to max_draft tokens, k drafts + 1 bonus must fit the budget and context.
        #    It is asked for on every step, verified or not: the policy scores it for free later.
        room = min(left - 1, self.model.context_length - self.model.kv_len - 1, o.max_draft)
        offer = NO_DRAFT
        if self.stats.source_fault is None and room >= o.min_draft:
            offer = self._advise(lambda: self.source.draft(self.history, room)) or NO_DRAFT
        draft = list(offer.tokens[:room])
        # 2. Decide: k = argmax (E[accepted | confidence, k] + 1) / C(k + 1), or 0 when no k beats a
        #    plain step. The offer may say which draft tokens were one continuation among several (forks).
        k = policy.choose(draft, offer.confidence, offer.kind, forced=self.options.verify_all,
                          forks=offer.forks) if draft else 0
        if k < len(draft):
            self._advise(lambda: self.source.truncate_pending(k))  # the source counts only what is verified
        if k < o.min_draft:
            # Plain step.
            t0 = self.clock() if self.clock else None
            row = self.model.forward_step([self._carried])
            seconds = (self.clock() - t0) if t0 is not None else None
            self.stats.record_forward(1, seconds)
            return self._commit_plain(row, self._carried, forward=True, seconds=seconds)
        return self._verify(draft[:k], left, stops)

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
            self.policy.record_plain(seconds)
        self.policy.observe([t])
        self._advise(lambda: self.source.observe([t]))
        return [t]

    def _verify(self, draft: list[int], left: int, stops: frozenset[int]) -> list[int]:
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
        s.record_forward(len(draft) + 1, seconds)
        self.policy.record_verify(len(draft), seconds)
        self.policy.observe(committed)
        self._advise(lambda: self.source.observe(committed))
        return committed

    def _sample(self, row: np.ndarray) -> int:
        """The sampler's pick on ``row``. Every row sampled here is committed (obligation 1: rows past
        the first mismatch are never sampled), so ``commit_hook`` sees exactly the committed tokens."""
        if self.row_hook is not None:
            self.row_hook(row, len(self.history), self.history)
        t = int(self.sampler.sample(row, self.history))
        if self.commit_hook is not None:
            self.commit_hook(row, t)
        return t
