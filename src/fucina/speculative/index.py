"""SpeculationIndex: the cascade of draft sources behind one DraftSource (docs/design.md §8).

Sources, in tie-break order:

1. ``conversation`` — an online SAM over every committed token (prompt and generated), fed by
   ``observe``;
2. ``ref0``, ``ref1``, ... — frozen SAMs over injected reference documents, each read through a
   per-conversation cursor;
3. ``cross-request`` — a snapshot of the tenant's earlier requests
   (:mod:`fucina.speculative.crossreq`), read through its own cursor (:meth:`set_cross_request`);
4. ``prompt`` — the text fed to the model (the prompt, each new turn) as a frozen SAM, read through a
   cursor fed the answer as the copy had it (:meth:`~fucina.speculative.rewrite.Rewriter.as_copied`):
   where the answer renames a name of a file its prompt quotes, the conversation's match ends at every
   use and this one runs on (on by default, with the rewrite rules);
5. ``realign`` — right after a copy broke (a renamed identifier, a replaced word), the copy picked
   up again in the text it came from, where the answer rejoined it (:mod:`fucina.speculative.realign`,
   on by default). Its draft and the SAMs' are both scored against what is committed, whichever is
   offered; realign drafts instead of the SAMs while it leads: the steps its draft held further, less
   those theirs did, clipped (ties go to the SAMs); where no SAM drafts, it drafts unless it trails;
6. ``resume`` — when the last committed token is one the conversation never saw (no SAM matches
   at all) and realign has nothing, the copy it broke continued one token on: the text after the token
   the previous match was followed by, as when a copied line gets one new word
   (:mod:`fucina.speculative.resume`, on by default);
7. ``recycling`` — the Token-Recycling chain walk (:mod:`fucina.speculative.recycling`), when no SAM matches.

Selection: every SAM source reports its match length; the longest match drafts (ties go to the
conversation, whose recency beats a static document, then to the first-added reference, the prompt
last) the whole
budget the caller asks for: how much of it is worth verifying is the decoder's policy
(:mod:`fucina.speculative.policy`), which prices the draft by this match length (the offer's
``confidence``, :meth:`SpeculationIndex.confidence`) and the acceptance it has measured per kind.
When the conversation wins but a reference drafts the same tokens (at least as many), the reference
drafts them: the offer is the same, and a prediction the prompt also quotes is credited with what it
predicted (never the prompt source: it drafts only where its match is the longest). Matches shorter than ``min_match`` fall through to recycling; an unseen recycling row drafts
nothing and the decoder takes a plain step. Drafting from a 1-token match is on by default: on the
dev agent traces it raises the tokens a step could commit from 1.8 to 2.1
(``python -m benchmarks.replay``), and the policy declines such drafts wherever they do not pay.

A SAM's or realign's draft is rewritten by the edits the answer keeps making to what it copies (a
renamed identifier: :mod:`fucina.speculative.rewrite`, on by default); it keeps its kind and credit. Where
such a draft held, the references' and the prompt's cursors are fed the committed tokens as the copy had them
(:meth:`~fucina.speculative.rewrite.Rewriter.as_copied`), so their match survives the edit.

Each step's offer is one :class:`~fucina.speculative.source.Draft`: tokens, confidence, the kind
(the name of the source that drafted) and the SAM's fork flags.

Acceptance is inferred at the draft -> observe seam: the tokens of the last ``draft`` (or
``suggest``) are compared with the slice passed to the next non-empty ``observe``; accepted =
their longest common prefix, drafted = the draft's length (cut by ``truncate_pending``). These
per-source counts are statistics only; losslessness never depends on them. ``context`` passed
to ``draft`` must be the observed stream (the decoder guarantees it): the SAM sources draft from
their own copy of it, recycling walks from ``context[-1]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from fucina.errors import (EmptyReference, InvalidArgument, InvalidOption, InvalidToken,
                           TooManyReferences)
from fucina.results import SourceReport
from fucina.speculative.index_options import MAX_REFERENCES, CascadeOptions, CascadeStats, options_for_costs
from fucina.speculative.realign import Realign
from fucina.speculative.recycling import Recycling
from fucina.speculative.resume import Resume
from fucina.speculative.rewrite import Rewriter
from fucina.speculative.sam import SamIndex
from fucina.speculative.sam_cursor import SamCursor
from fucina.speculative.source import NO_DRAFT, Draft, held

__all__ = ["CascadeOptions", "CascadeStats", "MAX_REFERENCES", "SpeculationIndex", "options_for_costs"]


#: Fewest tokens a reference must share with the conversation's draft to draft instead of it
#: (:meth:`SpeculationIndex._credit_reference`): the policy's shortest draft.
_MIN_CREDIT = 2


class _Drafter(Protocol):
    def match_len(self) -> int: ...
    def draft(self, max_len: int) -> list[int]: ...
    def forks(self, draft: Sequence[int]) -> list[bool]: ...


class _Cursor(_Drafter, Protocol):
    def feed_many(self, tokens: Sequence[int]) -> None: ...


class _Snapshot(Protocol):
    """What set_cross_request takes: a frozen index that hands out cursors (CrossSnapshot)."""

    def cursor(self) -> _Cursor: ...


@dataclass
class _Score:
    """One source's lifetime counts of its verified draft tokens."""

    name: str
    accepted: int = 0
    drafted: int = 0

    def stats(self) -> SourceReport:
        return SourceReport(name=self.name, drafted=self.drafted, accepted=self.accepted)


@dataclass
class _Reference:
    sam: SamIndex | _Snapshot  # kept alive (and unchanged) while this conversation drafts from it
    cursor: SamCursor | _Cursor
    score: _Score
    stream: Sequence[int] | None = None  # its token stream, where realign can read it


@dataclass
class _Pending:
    score: _Score
    draft: list[int]
    also: _Score | None = None  # a second score credited alike (realign: the owner of the stream it read)


#: A SAM source's bid for the step: (match length, tie-break order, score, drafter, its token stream or
#: None where realign cannot read it: the cross-request snapshot).
_Candidate = tuple[int, int, _Score, _Drafter, "Sequence[int] | None"]


class SpeculationIndex:
    """The cascade draft source: conversation SAM, reference SAMs, resume, recycling fallback."""

    def __init__(self, vocab_size: int, options: CascadeOptions | None = None) -> None:
        if vocab_size < 1:
            raise InvalidOption(f"vocab_size must be >= 1, got {vocab_size}")
        self.vocab_size = vocab_size
        self.options = opts = options if options is not None else CascadeOptions()
        self._conv = SamIndex()
        self._conv_score = _Score("conversation")
        self._refs: list[_Reference] = []
        self._cross: _Reference | None = None
        self._rec = (Recycling(vocab_size, opts.recycling_k, opts.recycling_max_chain)
                     if opts.recycling else None)
        self._rec_score = _Score("recycling")
        self._resume = Resume(self._conv) if opts.resume else None
        self._resume_score = _Score(Resume.name)
        self._conv_stream = self._conv.tokens  # one live view: realign knows a stream by identity
        self._realign = Realign() if opts.realign else None
        self._realign_score = _Score(Realign.name)
        self._rewriter = Rewriter() if opts.rewrite else None
        self._prompt: _Reference | None = None  # built at each feed (see observe)
        self._prompt_score = _Score("prompt")
        self._pending: _Pending | None = None

    # -- read-only views -------------------------------------------------------------------------

    @property
    def wants_topk(self) -> bool:
        """True iff the recycling fallback is enabled (it is the only top-K consumer)."""
        return self._rec is not None

    @property
    def conversation(self) -> SamIndex:
        """The online conversation SAM."""
        return self._conv

    @property
    def recycling(self) -> Recycling | None:
        """The recycling matrix (None when disabled), e.g. for ``topk_of`` tree drafting."""
        return self._rec

    @property
    def n_references(self) -> int:
        """Reference documents currently indexed."""
        return len(self._refs)

    @property
    def n_committed(self) -> int:
        """Tokens observed so far."""
        return len(self._conv)

    # -- DraftSource -------------------------------------------------------------------------------

    def draft(self, context: Sequence[int], budget: int) -> Draft:
        """This step's offer: the draft of :meth:`suggest` with its confidence, kind and fork flags."""
        return self._offer(context, budget, self.confidence())

    def suggest(self, context: Sequence[int], budget: int) -> list[int]:
        """The tokens of the step's offer, without pricing them (``confidence`` is not computed).

        The longest SAM match drafts, else a resumed copy, else recycling (see module docstring). A
        selected SAM whose draft comes back empty (its match ends where its text ends) yields to the
        next candidate, so "longest match wins" holds whenever the winner has a continuation.
        """
        return list(self._offer(context, budget, None).tokens)

    def confidence(self) -> int:
        """Longest SAM match, the confidence of the next draft; 0 if below ``min_match`` (the draft,
        if any, would come from recycling). O(1) per source."""
        # A match whose every occurrence ends its text drafts nothing (the prompt source right after a feed
        # matches the whole stream): it yields to the next source, so it prices nothing either.
        best = max([self._conv.match_len(), *(ref.cursor.match_len() for ref in self._sam_sources()
                                              if ref.cursor.draft(1))])
        if self._realign is not None and self._realign.takes(best >= self.options.min_match):
            return self._realign.confidence
        if not best and self._resume is not None and self._resume.ready:
            return 1  # a resume draft stands on the one broken token: priced like a 1-token match
        return best if best >= self.options.min_match else 0

    def observe(self, committed: Sequence[int]) -> None:
        """Append committed tokens to every source and settle the pending draft.

        Raises InvalidToken (and changes nothing) if any id is outside ``[0, vocab_size)``.
        """
        toks = [int(t) for t in committed]
        if not toks:
            return
        self._check_ids(toks)
        if self._resume is not None:
            self._resume.extend(toks)  # extends the conversation SAM
        else:
            self._conv.extend_many(toks)
        # References read the answer as the copy had it (Rewriter.as_copied): their match survives a rename.
        copied = toks if self._rewriter is None else self._rewriter.as_copied(toks)
        for ref in self._refs:
            ref.cursor.feed_many(copied)
        if self._prompt is not None:
            self._prompt.cursor.feed_many(copied)
        if self._cross is not None:
            self._cross.cursor.feed_many(toks)
        if self._rec is not None:
            self._rec.observe(toks)
        if self._realign is not None:
            self._realign.observe(toks)
        if self._rewriter is not None:
            self._rewriter.observe(toks)
        pending, self._pending = self._pending, None
        if pending is not None:
            accepted = held(pending.draft, toks)
            for score in (pending.score, pending.also):
                if score is not None:
                    score.accepted += accepted
                    score.drafted += len(pending.draft)

    def observe_fed(self, tokens: Sequence[int]) -> None:
        """:meth:`observe` tokens fed to the model (a prompt, a new turn), and index the whole stream as
        the ``prompt`` source (a frozen SAM, about 2 ms per 1000 tokens) when it is on."""
        rebuild = bool(tokens) and self.options.prompt and self._rewriter is not None
        if rebuild:
            self._prompt = None  # replaced below: its cursor need not read these tokens first
        self.observe(tokens)
        if rebuild:
            self._prompt = self._frozen_source(self._conv.tokens, self._prompt_score)

    def observe_topk(self, inputs: Sequence[int], topk: np.ndarray) -> None:
        """Forward verify-row top-K candidates to recycling (ignored when it is disabled)."""
        if self._rec is not None:
            self._rec.observe_topk(inputs, topk)

    def truncate_pending(self, n: int) -> None:
        """Declare that only the first ``n`` tokens of the pending draft will be verified.

        Call it when the caller (the decoder's policy, a chat turn gate) trims the draft before
        verifying it. The next ``observe`` then scores exactly ``draft[:n]``: drafted =
        ``min(n, len(draft))``, accepted = the common prefix of ``draft[:n]`` and the committed
        slice. The cut tail was never verified, so it counts neither as drafted nor as rejected.
        ``n == 0`` drops the pending draft entirely (no accounting); ``n`` past the draft's end
        changes nothing; with no pending draft this is a no-op. Raises InvalidArgument for negative ``n``.
        """
        if n < 0:
            raise InvalidArgument(f"truncate_pending wants n >= 0, got {n}")
        if self._pending is None:
            return
        if n == 0:
            self._pending = None
        else:
            del self._pending.draft[n:]

    # -- references (docs/design.md §8.4: the caller tokenizes) ---------------------------------------

    def add_reference(self, tokens: Sequence[int]) -> int:
        """Index a tokenized reference document; returns its slot (named ``ref{slot}``).

        The document must be tokenized with the model's own tokenizer. Its cursor is caught up
        over the already-observed stream, so it matches existing context immediately. Raises
        TooManyReferences, EmptyReference, or InvalidToken.
        """
        if len(self._refs) >= self.options.max_references:
            raise TooManyReferences(
                f"already holding {len(self._refs)} references (max_references="
                f"{self.options.max_references})")
        toks = [int(t) for t in tokens]
        if not toks:
            raise EmptyReference("a reference document needs at least one token")
        self._check_ids(toks)
        slot = len(self._refs)
        self._refs.append(self._frozen_source(toks, _Score(f"ref{slot}")))
        return slot

    def set_cross_request(self, snapshot: _Snapshot | None) -> None:
        """Draft also from ``snapshot`` (a :class:`~fucina.speculative.crossreq.CrossSnapshot` of this
        tenant's earlier requests), named ``cross-request``; None removes it.

        The snapshot is never mutated, so holding it here is what keeps its documents alive while
        this conversation drafts from them, whatever the tenant's index evicts meanwhile. Like a
        reference, its cursor is caught up over the observed stream. Only the caller can keep
        tenants apart: pass only the requesting tenant's own snapshot.
        """
        if self._pending is not None and self._cross is not None and self._pending.score is self._cross.score:
            self._pending = None
        if snapshot is None:
            self._cross = None
            return
        cursor = snapshot.cursor()
        cursor.feed_many(self._conv.tokens)
        self._cross = _Reference(snapshot, cursor, _Score("cross-request"))

    def clear_references(self) -> None:
        """Drop every reference (and the pending draft if a reference made it); slots restart at 0."""
        if self._pending is not None and any(self._pending.score is r.score for r in self._refs):
            self._pending = None
        if self._realign is not None and any(self._realign.stream is r.stream for r in self._refs):
            self._realign = Realign()  # it was picking up a copy of a dropped document
        self._refs.clear()

    # -- introspection ------------------------------------------------------------------------------

    def stats(self) -> CascadeStats:
        """Per-source accepted/drafted counts."""
        scores = [self._conv_score, *(r.score for r in self._sam_sources() if r.score is not self._prompt_score)]
        if self._prompt_score.drafted:  # listed once it has drafted
            scores.append(self._prompt_score)
        if self._realign_score.drafted:  # listed once it has drafted
            scores.append(self._realign_score)
        if self._resume_score.drafted:  # listed once it has drafted
            scores.append(self._resume_score)
        if self._rec is not None:
            scores.append(self._rec_score)
        return CascadeStats(tuple(s.stats() for s in scores))

    def nbytes(self) -> int:
        """Bytes held by all sources (the conversation SAM includes the committed stream)."""
        total = self._conv.nbytes() + sum(r.sam.nbytes() for r in self._refs)
        total += self._prompt.sam.nbytes() if self._prompt is not None else 0
        # The cross-request snapshot is the tenant's, shared across its requests: not counted here.
        return total + (self._rec.nbytes() if self._rec is not None else 0)

    # -- internals -------------------------------------------------------------------------------------

    def _offer(self, context: Sequence[int], budget: int, confidence: int | None) -> Draft:
        """Select this step's draft (see :meth:`suggest`); it becomes the pending one."""
        self._pending = None
        if self._realign is not None:
            self._realign.offered(None, 0, ())
        if self._rewriter is not None:
            self._rewriter.no_offer()
        if budget <= 0:
            return NO_DRAFT
        candidates: list[_Candidate] = [
            (self._conv.match_len(), 0, self._conv_score, self._conv, self._conv_stream)]
        for order, ref in enumerate(self._sam_sources(), start=1):
            candidates.append((ref.cursor.match_len(), order, ref.score, ref.cursor, ref.stream))
        candidates.sort(key=lambda c: (-c[0], c[1]))
        sam = self._sam_draft(candidates, budget)
        if self._realign is not None:
            realigned = self._realign.contest(budget, None if sam is None else sam[3])
            if realigned:
                return self._remember_realign(realigned, confidence, budget)
        if sam is not None:
            score, drafter, stream, tokens = sam
            forks = drafter.forks(tokens) if self.options.forks else None
            tokens, forks, copied = self._rewrite(tokens, forks, budget)
            if self._realign is not None and stream is not None:
                self._realign.offered(stream, drafter.occurrence() + 1, tokens[:copied], drafter.match_len())
            return self._remember(score, tokens, confidence, forks)
        if self._resume is not None:
            tokens = self._resume.draft(budget)
            if tokens:
                return self._remember(self._resume_score, tokens, confidence, None)
        if self._rec is not None:
            tokens = self._rec.suggest(context, budget)
            if tokens:
                return self._remember(self._rec_score, tokens, confidence, None)
        return NO_DRAFT

    def _sam_draft(self, candidates: list[_Candidate], budget: int
                   ) -> tuple[_Score, _Drafter, Sequence[int] | None, list[int]] | None:
        """The longest SAM match's draft (credited to a reference that drafts the same), or None."""
        for i, (match, _, score, drafter, stream) in enumerate(candidates):
            if match < self.options.min_match:
                break
            tokens = [int(t) for t in drafter.draft(budget)]
            if tokens:
                if drafter is self._conv:
                    return self._credit_reference(candidates[i + 1:], tokens, budget)
                return score, drafter, stream, tokens
        return None

    def _rewrite(self, tokens: list[int], forks: Sequence[bool] | None, budget: int
                 ) -> tuple[list[int], Sequence[bool] | None, int]:
        """The draft rewritten: (tokens, forks, how many first tokens are the copy's: realign follows those)."""
        return (tokens, forks, len(tokens)) if self._rewriter is None else self._rewriter.rewrite(tokens, forks, budget)

    def _remember_realign(self, tokens: list[int], confidence: int | None, budget: int) -> Draft:
        """Offer realign's draft (rewritten like the SAMs'): priced as its own kind, credited also to
        the source whose text it continues (a client's prediction picked up again is the prediction's)."""
        realign = self._realign
        stream = realign.stream
        owner = next((r.score for r in self._refs if r.stream is stream), self._conv_score)
        tokens, _, copied = self._rewrite(tokens, None, budget)
        realign.offered(stream, realign.start(), tokens[:copied], realign.confidence)
        self._pending = _Pending(owner, list(tokens), also=self._realign_score)
        return Draft(tuple(tokens), confidence, Realign.name, None)

    def _credit_reference(self, rest: list[_Candidate], tokens: list[int],
                          budget: int) -> tuple[_Score, _Drafter, Sequence[int] | None, list[int]]:
        """The conversation won: a reference whose draft is the conversation's, as far as the
        reference goes (at least ``_MIN_CREDIT`` tokens, or all of the conversation's), drafts instead, so a
        client's prediction that the prompt also quotes is credited with what it predicted.

        Example: the prompt quotes a file that is also the request's prediction, and the answer is
        copying it; the conversation matches 12 tokens (the code fence before the file too), the
        prediction 9, and both continue ``[a, b, c]`` -> ``ref0`` drafts ``[a, b, c, ...]``: the same
        offer, credited to the prediction. Near the prediction's end it offers what it has left (the
        conversation's draft runs on past it; the next step drafts the rest). Where they continue
        differently the conversation drafts.
        """
        for match, _, score, drafter, stream in rest:
            if match < self.options.min_match:
                break
            if score is self._prompt_score:
                continue
            alt = [int(t) for t in drafter.draft(budget)]
            common = min(len(alt), len(tokens))
            if alt[:common] == tokens[:common] and common >= min(len(tokens), _MIN_CREDIT):
                return score, drafter, stream, alt
        return self._conv_score, self._conv, self._conv_stream, tokens

    def _sam_sources(self) -> list[_Reference]:
        """The frozen sources read through cursors, in tie-break order: references, cross-request, prompt."""
        return [*self._refs, *(s for s in (self._cross, self._prompt) if s is not None)]

    def _frozen_source(self, tokens: Sequence[int], score: _Score) -> _Reference:
        """A frozen SAM over ``tokens``, its cursor caught up over the observed stream (the conversation SAM
        holds it), so it matches the existing context at once: a reference, or the prompt source."""
        sam = SamIndex.build(tokens)
        sam.freeze()
        cursor = sam.cursor()
        cursor.feed_many(self._conv.tokens)
        return _Reference(sam, cursor, score, sam.tokens)

    def _remember(self, score: _Score, tokens: list[int], confidence: int | None,
                  forks: Sequence[bool] | None) -> Draft:
        self._pending = _Pending(score, list(tokens))
        return Draft(tuple(tokens), confidence, score.name, None if forks is None else tuple(forks))

    def _check_ids(self, toks: list[int]) -> None:
        lo, hi = min(toks), max(toks)
        if lo < 0 or hi >= self.vocab_size:
            bad = lo if lo < 0 else hi
            raise InvalidToken(f"token id {bad} outside vocab [0, {self.vocab_size})")
