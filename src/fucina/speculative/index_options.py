"""The cascade's options and statistics (:class:`~fucina.speculative.index.SpeculationIndex`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from fucina.errors import InvalidOption
from fucina.results import SourceReport
from fucina.speculative.costs import CostTable

__all__ = ["CascadeOptions", "CascadeStats", "MAX_REFERENCES", "RECYCLING_EXPECTED_ACCEPTANCE", "options_for_costs"]


#: Token-Recycling acceptance measured by the model-free replay on Spec-Bench dev texts
#: (``python -m benchmarks.replay --from-bench``, see BENCHMARKS.md, "Model-free components"): 5-8% per group.
RECYCLING_EXPECTED_ACCEPTANCE = 0.10
#: Most reference documents one index holds (and one call may draft from).
MAX_REFERENCES = 8


def options_for_costs(table: CostTable, base: "CascadeOptions | None" = None) -> "CascadeOptions":
    """Cascade options for a measured verify cost table: recycling only where it can pay.

    A recycling chain of k tokens breaks even at acceptance (cost(k+1) - 1) / k. On CPUs where a
    verify costs nearly as much as k plain steps that is >= 20%, far above what recycling reaches,
    so its drafts would only be declined by the policy (or, verified, cost more than they commit). Where
    verifies are cheap (a GPU-like table) recycling stays on, as the design intends.
    """
    base = base if base is not None else CascadeOptions()
    ks = range(2, base.recycling_max_chain + 1)
    pays = min(table.break_even(k + 1) for k in ks) < RECYCLING_EXPECTED_ACCEPTANCE
    return dataclasses.replace(base, recycling=base.recycling and pays)


@dataclass(frozen=True)
class CascadeOptions:
    """Policy constants of the cascade; validated at construction (raises InvalidOption)."""

    #: SAM matches shorter than this fall through to recycling.
    min_match: int = 1
    #: Most reference documents one index holds.
    max_references: int = MAX_REFERENCES
    #: Offer the ``resume`` candidate after a never-seen token (priced by the policy as its own
    #: kind; on the dev aider traces it drafts ~20% of the steps nothing else could, at 18%
    #: acceptance: +0.09 tokens/step under a cheap verify, nothing under this CPU's).
    resume: bool = True
    #: Offer the ``realign`` candidate right after a copy broke (its own kind for the policy; on the
    #: Predicted Outputs rename edits it drafts the copy on past every renamed identifier, where the SAMs
    #: draft what followed the new name's earlier occurrence: BENCHMARKS.md, "Predicted Outputs").
    realign: bool = True
    #: Rewrite the SAMs' and realign's drafts by the edits the answer keeps making to the text it
    #: copies (:mod:`fucina.speculative.rewrite`; on Qwen's shlex rename the policy's bound 1.43x -> 2.26x).
    rewrite: bool = True
    #: Draft also from the prompt read as the copy had it (the ``prompt`` source: a frozen SAM over the
    #: text fed to the model, its cursor fed :meth:`~fucina.speculative.rewrite.Rewriter.as_copied`): the
    #: conversation SAM holds the answer as written, so its match ends at every renamed name, where a
    #: request without a prediction copies the file its prompt quotes. Needs ``rewrite``.
    prompt: bool = True
    #: Report each SAM draft's fork flags (``Draft.forks``), so the policy prices a token the text
    #: continued several ways apart from one it continued one way only; False: priced on the
    #: match length alone (the ablation ``fucina bench --methods match_only``).
    forks: bool = True
    #: Use the Token-Recycling fallback (and ask the decoder for top-K rows).
    recycling: bool = True
    #: Candidates kept per recycling row.
    recycling_k: int = 8
    #: Longest recycling chain walk.
    recycling_max_chain: int = 8

    def __post_init__(self) -> None:
        for name in ("min_match", "recycling_k", "recycling_max_chain"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidOption(f"{name} must be an int >= 1, got {value!r}")
        if not isinstance(self.max_references, int) or self.max_references < 0:
            raise InvalidOption(f"max_references must be >= 0, got {self.max_references}")


@dataclass(frozen=True)
class CascadeStats:
    """Per-source statistics, in tie-break order (conversation, references, cross-request, resume, recycling)."""

    sources: tuple[SourceReport, ...]

    def __getitem__(self, name: str) -> SourceReport:
        for s in self.sources:
            if s.name == name:
                return s
        raise KeyError(name)

    def __str__(self) -> str:
        return " ".join(str(s) for s in self.sources)
