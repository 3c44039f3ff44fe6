"""DraftPolicy: the one economic decision of when to verify and how long (docs/design.md §4).

Every step the draft source offers a candidate ``d`` (up to ``max_draft`` tokens) and its
confidence ``m`` (the source's match length: how many committed tokens its lookup agrees with).
The policy verifies ``d[:k]`` for the ``k`` that pays best, or takes a plain step:

    p(kind, e, f)  P(a drafted token is accepted | the tokens before it in the draft were),
                   where e = m + j - 1 is the match the j-th draft token extends (accepting
                   token j lengthens the match by one), kind is the drafting source and f is the
                   token's class: whether the source's text continued that string one way only
                   or several ways (its fork flag; sources without flags are priced on e alone),
                   and whether a unique token continues a word (its piece starts with a letter
                   or digit, not a space: the rest of a word the model has begun). At short
                   matches a forked token is accepted a third as often as a unique one, and a
                   unique word piece about twice as often as a unique word start.
    E[acc | k]   = sum_{j=1..k} prod_{i=1..j} p(kind, m + i - 1, f_i)   expected accepted tokens
    value(k)     = (E[acc | k] + 1) / C(k + 1)                        tokens per plain-step cost

A verify of k drafts commits accepted + 1 tokens (the correction or bonus is free) and costs
C(k+1) plain steps, where C is the measured table rescaled live by the observed verify/plain
timing ratio (clamped EWMA, docs/design.md §4.2). A plain step commits 1 token for 1 step,
so verifying pays iff value(k) > 1: the policy verifies the argmax k when value(k) >= 1 + min_gain
and otherwise steps plainly. One decision replaces per-source muting, the match-length budget
and the cost-gate lanes: all three were ways of guessing p from too little evidence.

Learning p costs nothing, because the committed stream does not depend on what was verified
(losslessness): every candidate, verified or not, is scored against the tokens that are
committed after it. A candidate whose first ``a`` tokens match and whose next one does not gives
trials j = 1..a+1 (successes j <= a) at (e, f) = (m + j - 1, f_j), each scored as soon as its token
is committed: a long draft that holds teaches its buckets as it goes (scored only when it ended, a
63-token candidate left p at the prior for a whole draft length, and a file-sized copy was verified 5
tokens at a time where 56 held: BENCHMARKS.md, "Predicted Outputs"). So a declined source keeps
being measured, and nothing needs the earlier gate's probes, backoff or hysteresis (docs/design.md §4.7): a bad
source is never verified twice on a guess, and a good one is verified as soon as its record says
it pays. Each (kind, e-bucket, f) is a Beta posterior whose prior is ``prior_weight``
pseudo-trials at the acceptance the model-free replay measured (``PRIOR_ACCEPTANCE``,
``PRIOR_UNIQUE``, ``PRIOR_FORKED``).

The never-a-loss floor is a consequence, not a rule: the policy only verifies where its
posterior prices a win, and the posterior is corrected after every step.
"""

from __future__ import annotations

import bisect
import math
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Sequence

from fucina.errors import InvalidOption
from fucina.speculative.costs import CostTable

__all__ = ["PolicyOptions", "DraftPolicy", "AcceptanceModel", "WordPieces", "PRIOR_ACCEPTANCE", "PRIOR_UNIQUE",
           "PRIOR_FORKED", "PRIOR_PIECE", "N_CLASSES", "E_EDGES", "N_BUCKETS", "SAMPLED_SUFFIX", "e_bucket",
           "e_label", "draft_bucket", "token_bucket", "kind_of"]

#: Lower edges of the match-length buckets p is learned over: 1..7 one by one (acceptance climbs
#: fastest there), then 8-11, 12-15, 16-23, 24-31, 32+. Bucket 0 holds e = 0 (no match: recycling
#: or a source that reports no confidence).
E_EDGES: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32)

#: Per-token acceptance by bucket: every position of the Spec-Bench dev reference answers offered
#: its candidate and scored against the answer (``python -m benchmarks.replay --from-bench
#: --bench-dir ../shared/bench --no-recycling --no-synthetic --priors``; docs/benchmarks-archive/2026-12-01-xeon.md, "One drafting policy"), the e = 0
#: bucket from recycling's 5-8%. The agent traces accept more (m1 0.43, m32+ 0.99) but a small
#: model copies less than a recorded answer, so the lower figures are the safer start. Priors
#: only: ``prior_weight`` pseudo-trials each, soon outweighed by this generation's own candidates.
PRIOR_ACCEPTANCE: tuple[float, ...] = (0.05, 0.30, 0.46, 0.53, 0.58, 0.62, 0.62, 0.67, 0.70, 0.77, 0.85, 0.86, 0.91)
#: The same, split by what the source said of each token (``forks``, see
#: :func:`fucina.speculative.sam.draft_forks`): the text continued its string one way only
#: (unique) or several ways (forked); measured like PRIOR_ACCEPTANCE (``--priors``, labels
#: ``m2 unique``, ``m2 forked``). At short matches a forked token is accepted a third as often
#: as a unique one (m1: 0.17 vs 0.47; the agent traces: 0.14-0.40 vs 0.50-0.71). Forked tokens
#: past m7 are rare (under 30 trials a bucket): those priors are the traces' 0.38-0.67, held to 0.5.
PRIOR_UNIQUE: tuple[float, ...] = (0.05, 0.47, 0.58, 0.60, 0.63, 0.64, 0.63, 0.68, 0.70, 0.77, 0.87, 0.86, 0.91)
PRIOR_FORKED: tuple[float, ...] = (0.05, 0.17, 0.21, 0.23, 0.21, 0.37, 0.41, 0.45, 0.40, 0.45, 0.50, 0.50, 0.50)
#: Unique tokens that continue a word (see :class:`WordPieces`), measured like PRIOR_UNIQUE with the
#: word pieces given (labels ``m2 piece``; PRIOR_UNIQUE counts word starts and pieces together, as
#: a policy without a tokenizer does). The model has begun a word and the text's one continuation
#: finishes it: on the reference answers m1 0.65 vs 0.37 for a unique word start, m2 0.73 vs 0.46;
#: on SmolLM2's own outputs m1 0.78 vs 0.30 (docs/benchmarks-archive/2026-12-01-xeon.md, "Word pieces"). Past m16 pieces are rare (under 50
#: trials a bucket): those priors are PRIOR_UNIQUE's.
PRIOR_PIECE: tuple[float, ...] = (0.05, 0.65, 0.73, 0.79, 0.81, 0.88, 0.82, 0.80, 0.80, 0.76, 0.87, 0.86, 0.91)
#: Bucket ids per token class: a token's id is its match bucket + N_BUCKETS * class, where class 0 =
#: no fork information (recycling, sources without ``forks``), 1 = unique, 2 = forked, 3 = unique
#: and a word piece.
N_BUCKETS = len(E_EDGES) + 1
N_CLASSES = 4
_CLASS_LABELS = ("", " unique", " forked", " piece")


def e_bucket(e: int) -> int:
    """Bucket of a match length ``e`` under E_EDGES: 0 for e <= 0, then 1.. for 1, 2, ..., 32+."""
    return bisect.bisect_right(E_EDGES, e)


def draft_bucket(base: int, j: int) -> int:
    """Bucket of the ``j``-th token (1-based) of a draft drawn from a match of ``base`` tokens:
    accepting tokens 1..j-1 lengthens the match, so it extends e = base + j - 1. A draft with no
    match behind it (base 0: recycling) keeps every token in bucket 0."""
    return e_bucket(base + j - 1) if base else 0


def token_bucket(base: int, j: int, forks: Sequence[bool] | None,
                 pieces: Sequence[bool] | None = None) -> int:
    """Bucket id of the ``j``-th draft token: :func:`draft_bucket`, offset by its class when the
    source gave ``forks`` (one flag per draft token): forked, unique, or, when ``pieces`` (one flag
    per draft token, from :class:`WordPieces`) says so, a unique word piece."""
    b = draft_bucket(base, j)
    if forks is None:
        return b
    if forks[j - 1]:
        return b + 2 * N_BUCKETS
    return b + N_BUCKETS * (3 if pieces is not None and pieces[j - 1] else 1)


class WordPieces:
    """Which draft tokens continue a word: their piece starts with an ASCII letter or digit.

    A tokenizer splits a word into a first piece (which carries the space before it: ``" extra"``)
    and pieces that continue it (``"ordinary"``). A continuing piece the source's text has only
    one way on from is accepted far more often than a word start: the model has begun the word,
    and the text finishes it. Built from the model's ``token_bytes``; one lookup per token,
    memoized (pieces never change for a model).

    E.g. with pieces ``{5: b" extra", 6: b"ordinary", 7: b"."}``, ``WordPieces(...)([5, 6, 7])`` is
    ``[False, True, False]``.
    """

    def __init__(self, token_bytes: Callable[[int], bytes]) -> None:
        self._token_bytes = token_bytes
        self._memo: dict[int, bool] = {}  # invariant: memo[t] is the rule applied to token_bytes(t)

    def __call__(self, tokens: Sequence[int]) -> list[bool]:
        memo, out = self._memo, []
        for t in tokens:
            flag = memo.get(t)
            if flag is None:
                piece = self._token_bytes(t)
                flag = memo[t] = bool(piece) and piece[:1].isalnum()
            out.append(flag)
        return out


def e_label(bucket: int) -> str:
    """Readable range of a bucket: ``m0``, ``m1``, ..., ``m8-11``, ``m32+``; a classed id gets
    `` unique``, `` forked`` or `` piece`` after it."""
    if bucket >= N_BUCKETS:
        return e_label(bucket % N_BUCKETS) + _CLASS_LABELS[bucket // N_BUCKETS]
    if bucket == 0:
        return "m0"
    lo = E_EDGES[bucket - 1]
    if bucket == len(E_EDGES):
        return f"m{lo}+"
    hi = E_EDGES[bucket] - 1
    return f"m{lo}" if hi == lo else f"m{lo}-{hi}"


#: The confidence given to a source that reports none (no ``confidence()``): the top bucket's, so
#: its first candidates are verified (as the earlier gate started open, docs/design.md §4.7) and from then on
#: its own scored record prices it; a bad one costs a few verifies (the floor tests bound them).
UNKNOWN_CONFIDENCE = E_EDGES[-1]

#: The kind suffix of a sampled generation's candidates (see ``PolicyOptions.split_sampled``).
SAMPLED_SUFFIX = "@sampled"

_REF = re.compile(r"ref\d+")


def kind_of(source_name: str | None) -> str:
    """The acceptance class of a source name: every reference document (``ref0``, ``ref1``, ...)
    is one kind, since a prediction and a pasted document are copied alike."""
    if source_name is None:
        return "draft"
    return "reference" if _REF.fullmatch(source_name) else source_name


#: The longest draft a verify may carry by default. The policy's arithmetic (acceptance along the draft
#: against the measured cost of n rows) decides the length below it; the cap only bounds the cost
#: table's reach and the pricing loop. 63: a verify of 64 rows, a whole number of the kernels' row tiles
#: (on an AMD EPYC 64 rows cost 15.8 plain steps and 49 rows 14.9: 48 drafts bought the dearest row
#: count of its stair), and long enough that a copy's verify pays for itself where large batches are
#: cheap (BENCHMARKS.md, "Drafts as long as they pay"). The patched engine is checked bitwise to 64 rows.
DEFAULT_MAX_DRAFT = 63


@dataclass(frozen=True)
class PolicyOptions:
    """Constants of the policy (validated loudly: degenerate values raise InvalidOption)."""

    #: Verify only when the best predicted value(k) >= 1 + min_gain (value 1 = a plain step). 10%:
    #: a verify predicted to win less is within the estimate's error, and on this CPU such marginal
    #: verifies were what lost time on free text (docs/benchmarks-archive/2026-12-01-xeon.md, "One drafting policy").
    min_gain: float = 0.10
    #: Shortest and longest verified draft.
    min_draft: int = 2
    max_draft: int = DEFAULT_MAX_DRAFT
    #: Pseudo-trials behind each bucket's prior acceptance.
    prior_weight: float = 4.0
    #: Trials a bucket remembers: each new trial discounts its older ones by 1 - 1/memory, so a
    #: source whose drafts turn bad (or good) mid-generation is re-priced within ~memory trials.
    memory: int = 64
    #: The live cost scale: EWMA weight of one timing sample and the clamp on it.
    scale_alpha: float = 0.2
    scale_min: float = 0.25
    scale_max: float = 4.0
    #: Learn a sampled generation's acceptance apart from a greedy one's (kinds ``conversation``
    #: and ``conversation@sampled``): a sampler at T > 0 accepts the same drafts less often, and
    #: an acceptance model shared across calls would otherwise price a sampled call by greedy ones.
    split_sampled: bool = True
    #: Price unique tokens that continue a word apart from word starts, when the caller gives the
    #: policy the tokenizer's word pieces (:class:`WordPieces`).
    word_pieces: bool = True

    def __post_init__(self) -> None:
        if not (0.0 <= self.min_gain < 10.0):
            raise InvalidOption(f"min_gain must be in [0, 10), got {self.min_gain!r}")
        for name in ("min_draft", "max_draft"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InvalidOption(f"{name} must be an int >= 1, got {v!r}")
        if self.max_draft < self.min_draft:
            raise InvalidOption(f"max_draft={self.max_draft} must be >= min_draft={self.min_draft}")
        if not isinstance(self.memory, int) or isinstance(self.memory, bool) or self.memory < 2:
            raise InvalidOption(f"memory must be an int >= 2, got {self.memory!r}")
        if not (self.prior_weight > 0 and math.isfinite(self.prior_weight)):
            raise InvalidOption(f"prior_weight must be finite and > 0, got {self.prior_weight!r}")
        if not 0 < self.scale_alpha <= 1:
            raise InvalidOption(f"scale_alpha must be in (0, 1], got {self.scale_alpha}")
        if not 0 < self.scale_min <= 1 <= self.scale_max:
            raise InvalidOption(f"need 0 < scale_min <= 1 <= scale_max, got [{self.scale_min}, {self.scale_max}]")


class _Candidate:
    """A draft offered at one position, scored against the tokens committed after it."""

    __slots__ = ("draft", "base", "kind", "forks", "pieces", "matched")

    def __init__(self, draft: list[int], base: int, kind: str, forks: Sequence[bool] | None,
                 pieces: Sequence[bool] | None = None) -> None:
        self.draft = draft  # invariant: non-empty
        self.base = base  # the match length behind draft[0]; draft[j] extends a match of base + j
        self.kind = kind
        self.forks = forks  # invariant: None or one flag per draft token
        self.pieces = pieces  # invariant: None or one flag per draft token (WordPieces)
        self.matched = 0  # invariant: draft[:matched] equals the tokens committed since the offer


class AcceptanceModel:
    """The learned p(kind, e): discounted Beta posteriors per (kind, bucket) over the priors.

    One model may outlive a generation: :class:`fucina.LLM` keeps one per model and hands it to
    every call's decoder, so a call starts from what earlier calls scored instead of from the
    priors (per-bucket acceptance rates, never text: sharing them across callers leaks nothing a
    draft could). Not thread-safe; the LLM's lock serializes its calls.
    """

    def __init__(self, *, prior_weight: float = 4.0, memory: int = 64) -> None:
        PolicyOptions(prior_weight=prior_weight, memory=memory)  # the same validation
        self.prior_weight = prior_weight
        self._prior = tuple(prior_weight * p for p in PRIOR_ACCEPTANCE + PRIOR_UNIQUE + PRIOR_FORKED + PRIOR_PIECE)
        self._keep = 1.0 - 1.0 / memory
        # Discounted successes and trials per (kind, bucket), priors excluded; invariant 0 <= hits <= trials.
        self._hits: dict[tuple[str, int], float] = defaultdict(float)
        self._trials: dict[tuple[str, int], float] = defaultdict(float)
        # Undiscounted (hits, trials) per (kind, bucket), for reports and the replay's priors.
        self._scored: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])

    @classmethod
    def for_options(cls, options: "PolicyOptions") -> "AcceptanceModel":
        return cls(prior_weight=options.prior_weight, memory=options.memory)

    def acceptance(self, kind: str, e: int, fork: bool | None = None) -> float:
        """Posterior mean of p(kind, e) (of a unique or forked token when ``fork`` is given)."""
        return self.along(kind, e, 1, None if fork is None else (fork,))[0]

    def along(self, kind: str, base: int, n: int, forks: Sequence[bool] | None = None,
              pieces: Sequence[bool] | None = None) -> list[float]:
        """Posterior means of p for tokens 1..n of a ``kind`` draft from a match of ``base`` tokens
        (``forks``: the draft's fork flags, at least n of them, or None; ``pieces`` likewise, its
        word-piece flags).

        The hot path of every step (the policy prices each candidate with it): lookups are local.
        """
        hits, trials, prior, w = self._hits.get, self._trials.get, self._prior, self.prior_weight
        out = []
        for j in range(1, n + 1):
            b = token_bucket(base, j, forks, pieces)
            key = (kind, b)
            out.append((hits(key, 0.0) + prior[b]) / (trials(key, 0.0) + w))
        return out

    def trial(self, key: tuple[str, int], hit: float) -> None:
        """One scored draft token of (kind, bucket) ``key``: accepted (1.0) or not (0.0)."""
        keep = self._keep
        self._hits[key] = self._hits[key] * keep + hit
        self._trials[key] = self._trials[key] * keep + 1.0
        tally = self._scored[key]
        tally[0] += int(hit)
        tally[1] += 1

    def learned(self) -> dict[str, dict[str, tuple[int, int]]]:
        """Every trial scored so far (undiscounted), per kind and bucket: {kind: {label: (hits, trials)}}."""
        out: dict[str, dict[str, tuple[int, int]]] = defaultdict(dict)
        for (kind, b), (h, n) in sorted(self._scored.items()):
            out[kind][e_label(b)] = (h, n)
        return dict(out)


class DraftPolicy:
    """Chooses the verified draft length per step from the cost table and learned acceptance.

    The decoder calls :meth:`choose` with each step's candidate (also when it will not verify: the
    candidate is scored later for free), :meth:`observe` with every committed slice,
    :meth:`record_plain` after each plain forward and :meth:`record_verify` after each verify.
    """

    def __init__(self, table: CostTable, options: PolicyOptions | None = None, *,
                 acceptance: AcceptanceModel | None = None, sampled: bool = False,
                 pieces: Callable[[Sequence[int]], list[bool]] | None = None) -> None:
        self.table = table
        self.options = o = options or PolicyOptions()
        #: Word-piece flags of a draft (a :class:`WordPieces` over the model's tokenizer), or None:
        #: unique tokens are then priced as one class. Off when ``word_pieces`` is.
        self.pieces = pieces if o.word_pieces else None
        #: Appended to every kind when the generation samples (``split_sampled``).
        self.kind_suffix = SAMPLED_SUFFIX if sampled and o.split_sampled else ""
        self.scale = 1.0  # live multiplier on the table
        self.plain_seconds: float | None = None  # EWMA of one plain forward
        #: What is known of p; shared with other generations when the caller passes one.
        self.model = acceptance if acceptance is not None else AcceptanceModel.for_options(o)
        self._pending: list[_Candidate] = []  # invariant: every entry unresolved, oldest first
        self._costs = [table.cost(n) for n in range(o.max_draft + 2)]  # _costs[n] = table.cost(n)
        self.declined = 0  # candidates of >= min_draft tokens not verified
        self.chosen = 0  # verifies chosen by the policy

    # -- the decision ------------------------------------------------------------------------
    def acceptance(self, kind: str, e: int, fork: bool | None = None) -> float:
        """Posterior mean of p(kind, e)."""
        return self.model.acceptance(kind, e, fork)

    def verify_cost(self, rows: int) -> float:
        """Cost of a verify over ``rows`` tokens: table * live scale, never < 1 plain step."""
        cost = self._costs[rows] if rows < len(self._costs) else self.table.cost(rows)
        return max(1.0, cost * self.scale)

    def best_length(self, n: int, confidence: int | None, kind: str,
                    forks: Sequence[bool] | None = None,
                    pieces: Sequence[bool] | None = None) -> tuple[int, float]:
        """(k, value(k)) maximizing value over k in [min_draft, min(n, max_draft)]; (0, 1.0) if none."""
        o = self.options
        best_k, best_v = 0, 1.0
        survive, expected = 1.0, 0.0
        for j, p in enumerate(self.model.along(kind, confidence or 0, min(n, o.max_draft), forks, pieces), start=1):
            survive *= p
            expected += survive
            if j >= o.min_draft:
                v = (expected + 1.0) / self.verify_cost(j + 1)
                if v > best_v:
                    best_k, best_v = j, v
        return best_k, best_v

    def choose(self, draft: Sequence[int], confidence: int | None, source_name: str | None,
               *, forced: bool = False, forks: Sequence[bool] | None = None) -> int:
        """How many tokens of ``draft`` to verify (0 = a plain step); the candidate is kept for scoring.

        ``forks``: the source's fork flag of each draft token, read up to the draft's length (None,
        or a list shorter than the draft: priced without; with them, the policy's ``pieces`` split
        the unique tokens). ``forced`` (the gate-open ablation) verifies the whole draft but still
        scores it.
        """
        if not draft:
            return 0
        kind = kind_of(source_name) + self.kind_suffix
        confidence = UNKNOWN_CONFIDENCE if confidence is None else confidence
        if forks is not None:
            forks = [bool(f) for f in forks[:len(draft)]] if len(forks) >= len(draft) else None
        draft = [int(t) for t in draft]
        pieces = self.pieces(draft) if forks is not None and self.pieces is not None else None
        self._pending.append(_Candidate(draft, confidence, kind, forks, pieces))
        o = self.options
        if forced:
            return len(draft) if len(draft) >= o.min_draft else 0
        k, v = self.best_length(len(draft), confidence, kind, forks, pieces)
        if k and v >= 1.0 + o.min_gain:
            self.chosen += 1
            return k
        if len(draft) >= o.min_draft:
            self.declined += 1
        return 0

    # -- observations ------------------------------------------------------------------------
    def observe(self, committed: Sequence[int]) -> None:
        """Score pending candidates against newly committed tokens (in stream order)."""
        if not self._pending:
            return
        still: list[_Candidate] = []
        trial = self.model.trial
        for c in self._pending:
            d, j, n = c.draft, c.matched, len(c.draft)
            base, kind, forks, pieces = c.base, c.kind, c.forks, c.pieces
            done = False
            for t in committed:
                # Trial j + 1: token d[j] at e = base + j, given d[:j] held. It resolves now.
                hit = d[j] == t
                trial((kind, token_bucket(base, j + 1, forks, pieces)), 1.0 if hit else 0.0)
                if not hit:
                    done = True
                    break
                j += 1
                if j == n:
                    done = True
                    break
            c.matched = j
            if not done:
                still.append(c)
        self._pending = still

    def reset_pending(self) -> None:
        """Forget unscored candidates (the stream they would be scored on was cut off)."""
        self._pending.clear()

    def record_plain(self, seconds: float | None = None) -> None:
        """A plain forward took ``seconds`` (None: no clock)."""
        if seconds is not None and seconds > 0:
            a = self.options.scale_alpha
            self.plain_seconds = seconds if self.plain_seconds is None else (1 - a) * self.plain_seconds + a * seconds

    def record_verify(self, drafted: int, seconds: float | None = None) -> None:
        """A verify of ``drafted`` tokens took ``seconds``; moves the live scale (acceptance is
        learned from the candidates, not here)."""
        o = self.options
        if seconds is not None and seconds > 0 and self.plain_seconds:
            ratio = (seconds / self.plain_seconds) / self.table.cost(drafted + 1)
            ratio = min(o.scale_max, max(o.scale_min, ratio))
            self.scale = min(o.scale_max, max(o.scale_min, (1 - o.scale_alpha) * self.scale + o.scale_alpha * ratio))

    # -- summaries ---------------------------------------------------------------------------
    def learned(self) -> dict[str, dict[str, tuple[int, int]]]:
        """Every trial the acceptance model scored (this generation's and, if shared, earlier ones')."""
        return self.model.learned()

    def summary(self) -> dict[str, object]:
        """JSON-ready state for stats lines and benches."""
        return {"chosen": self.chosen, "declined": self.declined, "scale": round(self.scale, 3),
                "learned": {k: {b: list(v) for b, v in d.items()} for k, d in self.learned().items()}}

    def __str__(self) -> str:
        return f"policy: chosen={self.chosen} declined={self.declined} scale={self.scale:.2f}"
