"""What a replay tallies: per workload a :class:`WorkloadResult`, holding a :class:`SourceTally` per
draft source and per confidence lane."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from fucina.speculative.policy import e_label

__all__ = ["NO_DRAFT", "SourceTally", "WorkloadResult"]

#: The source a step is tallied under when nothing was drafted (or the policy verified nothing).
NO_DRAFT = "none"


@dataclass
class SourceTally:
    """What one source did across a workload.

    ``steps`` counts the steps this source drafted (for ``none``: the steps nobody drafted);
    ``mean_accepted`` is accepted tokens per such step.
    """

    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    ns: int = 0  # suggest + observe wall time of the steps this source drafted

    def as_dict(self) -> dict[str, float]:
        return {
            "steps": self.steps, "drafted": self.drafted, "accepted": self.accepted,
            "acceptance": self.accepted / self.drafted if self.drafted else 0.0,
            "mean_accepted": self.accepted / self.steps if self.steps else 0.0,
            "us_per_step": self.ns / 1e3 / self.steps if self.steps else 0.0,
        }


@dataclass
class WorkloadResult:
    """Totals and per-source tallies of one workload."""

    name: str
    streams: int = 0
    tokens: int = 0  # replayed (scored) tokens
    steps: int = 0
    ns: int = 0
    cost: float = 0.0  # plain-step equivalents under the pricing table (0 without one)
    ceiling_steps: int = 0
    ceiling_cost: float = 0.0
    perfect_cost: float = 0.0  # the perfect policy's cost over the same drafts (0 without a table)
    sources: dict[str, SourceTally] = field(default_factory=lambda: defaultdict(SourceTally))
    #: The same steps keyed by the confidence bucket (match length) of the candidate.
    lanes: dict[int, SourceTally] = field(default_factory=lambda: defaultdict(SourceTally))

    def as_dict(self) -> dict[str, object]:
        d: dict[str, object] = {
            "name": self.name, "streams": self.streams, "tokens": self.tokens, "steps": self.steps,
            "tokens_per_step": self.tokens / self.steps if self.steps else 0.0,
            "us_per_step": self.ns / 1e3 / self.steps if self.steps else 0.0,
            "sources": {k: v.as_dict() for k, v in sorted(self.sources.items())},
            "lanes": {e_label(k): v.as_dict() for k, v in sorted(self.lanes.items())},
        }
        if self.cost:
            d["projected_speedup"] = self.tokens / self.cost
        if self.perfect_cost:
            d["perfect_policy_speedup"] = self.tokens / self.perfect_cost
        if self.ceiling_steps:
            d["ceiling_tokens_per_step"] = self.tokens / self.ceiling_steps
            d["ceiling_speedup"] = self.tokens / self.ceiling_cost if self.ceiling_cost else None
        return d
