"""The one place a speculative generation is built: its index, references, cross-request snapshot,
drafting policy (with the shared acceptance model) and decoder.

:class:`fucina.LLM` calls, :class:`fucina.chat.Conversation` turns, ``fucina bench``'s methods and
the bench tools all build their speculative decoders through a :class:`DecoderFactory`, so what the
bench measures is the product's path, not a copy of it. A factory holds what one model's
generations share: the :class:`SpeculationOptions` (cost table, decoder options with the exact-mode
draft cap of :func:`decoder_options` applied, cascade options, clock) and the drafting policy's
:class:`~fucina.speculative.policy.AcceptanceModel`, so each generation starts from what the earlier
ones learned of the sources' acceptance. Plain decoding needs none of this:
``PlainDecoder(model, sampler)`` (:mod:`fucina.plain`).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol, Sequence

from fucina.errors import InvalidOption
from fucina.grammar import ConstrainedSampler
from fucina.model_protocol import Model
from fucina.sampling import Sampler
from fucina.speculative.costs import CostTable
from fucina.speculative.decoder import SpecOptions, SpeculativeDecoder
from fucina.speculative.grammar_drafts import GrammarDrafts
from fucina.speculative.index import CascadeOptions, SpeculationIndex, options_for_costs
from fucina.speculative.policy import AcceptanceModel
from fucina.speculative.source import DraftSource

if TYPE_CHECKING:
    from fucina.doctor import InvarianceReport

__all__ = ["CrossRequestSource", "DecoderFactory", "SpeculationOptions", "capped_max_draft", "decoder_options"]


class CrossRequestSource(Protocol):
    """Where a generation drafts from earlier calls (:class:`~fucina.speculative.crossreq.CrossRequestIndex`)."""

    def snapshot(self): ...


def capped_max_draft(max_draft: int, *, exact: bool, report: "InvarianceReport | None") -> int:
    """``max_draft``, capped in exact mode so every verify stays inside the batch sizes the engine
    computes bitwise (``report``: its batch-invariance check; None: not measured, no cap)."""
    if not exact or report is None:
        return max_draft
    from fucina.doctor import effective_max_draft

    return min(max_draft, effective_max_draft(report, True))


def decoder_options(base: SpecOptions | None = None, *, exact: bool,
                    report: "InvarianceReport | None") -> SpecOptions:
    """``base`` (default :class:`SpecOptions`) with the draft cap exact mode needs (:func:`capped_max_draft`)."""
    opts = base if base is not None else SpecOptions()
    max_draft = capped_max_draft(opts.policy.max_draft, exact=exact, report=report)
    return dataclasses.replace(opts, policy=dataclasses.replace(opts.policy, max_draft=max_draft))


@dataclass(frozen=True)
class SpeculationOptions:
    """How one model's speculative generations are built (the same for every generation)."""

    #: What a verify of n rows costs in plain steps (the policy prices drafts with it).
    cost_table: CostTable
    #: Decoder and policy options, the draft cap already applied (:func:`decoder_options`).
    decoder: SpecOptions = field(default_factory=SpecOptions)
    #: The speculation index's options, before the cost table decides recycling.
    cascade: CascadeOptions = field(default_factory=CascadeOptions)
    #: True: recycling only where the cost table says it can pay (:func:`options_for_costs`, what every
    #: product path does); False: ``cascade`` as given (the exactness audit's fixed cascade).
    recycling_by_costs: bool = True
    #: Timer of the policy's live cost rescale (None: the static table).
    clock: Callable[[], float] | None = time.perf_counter

    @property
    def index_options(self) -> CascadeOptions:
        """The options each generation's :class:`SpeculationIndex` is built with."""
        return options_for_costs(self.cost_table, self.cascade) if self.recycling_by_costs else self.cascade


class DecoderFactory:
    """Builds ``model``'s speculative generations; they share one :class:`AcceptanceModel`.

    ``acceptance``: what earlier generations learned (default: a fresh model from the policy's
    priors, shared by every decoder this factory builds).
    """

    def __init__(self, model: Model, options: SpeculationOptions, *, acceptance: AcceptanceModel | None = None) -> None:
        self.model = model
        self.options = options
        #: The drafting policy's acceptance model every decoder of this factory learns in.
        self.acceptance = (acceptance if acceptance is not None
                           else AcceptanceModel.for_options(options.decoder.policy))

    def index(self, *, references: Sequence[Sequence[int]] = (),
              cross_request: CrossRequestSource | None = None) -> SpeculationIndex:
        """A fresh speculation index holding ``references`` and a snapshot of ``cross_request``."""
        index = SpeculationIndex(self.model.vocab_size, self.options.index_options)
        for ref in references:
            index.add_reference(ref)
        if cross_request is not None:
            index.set_cross_request(cross_request.snapshot())
        return index

    def decoder(self, sampler: Sampler, *, references: Sequence[Sequence[int]] = (),
                cross_request: CrossRequestSource | None = None,
                source: DraftSource | None = None) -> SpeculativeDecoder:
        """A speculative decoder sampling with ``sampler``, drafting from a fresh :meth:`index`
        (or from ``source``, e.g. a wrapper around one, which then holds the references itself).
        A :class:`~fucina.grammar.ConstrainedSampler` also drafts its grammar's forced tokens
        (:class:`~fucina.speculative.grammar_drafts.GrammarDrafts`)."""
        if source is not None and (references or cross_request is not None):
            raise InvalidOption("pass references and cross_request to index(), not with a ready source")
        if source is None:
            source = self.index(references=references, cross_request=cross_request)
        if isinstance(sampler, ConstrainedSampler) and self.options.decoder.grammar_drafts:
            source = GrammarDrafts(source, sampler.state.forced)
        opts = self.options
        return SpeculativeDecoder(self.model, source, sampler, opts.decoder, cost_table=opts.cost_table,
                                  clock=opts.clock, acceptance=self.acceptance)
