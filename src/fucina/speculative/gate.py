"""CostGate: decides WHEN to speculate, never WHAT is committed (design record §3-§4).

est_speedup = committed tokens / verify cost in plain-step equivalents, over a rolling window of
verifies (plain and fallback steps never enter it: only verifies can lose time). Verify cost is a
measured :class:`CostTable` scaled by a live multiplier learned from verify/plain timings with a
clamped EWMA, so one noisy timing cannot flip the gate while a table from another machine is
corrected within a few verifies. With no clock the table alone applies.

:class:`LaneGate` runs one such gate per confidence lane (the draft source's match length), so a
losing run of short-match guesses cannot switch off the long-match drafts that win.
"""

from __future__ import annotations

import bisect
import enum
import math
from collections import deque
from dataclasses import dataclass

from fucina.errors import InvalidOption, ProbeStepsZero, RateWindowTooSmall, ReprobeAfterZero
from fucina.speculative.costs import CostTable


class GateState(enum.Enum):
    ON = "on"
    OFF = "off"  # resting: plain steps until the backoff expires
    PROBING = "probing"


@dataclass(frozen=True)
class GateOptions:
    """Policy constants (validated loudly: degenerate values raise at construction)."""

    min_speedup: float = 1.0  # speculate while est >= this
    probe_margin: float = 0.10  # re-enable only at est >= min_speedup + margin (hysteresis)
    rate_window: int = 16  # verifies in the rolling window
    min_window_drafted: int = 8  # evaluate only once the window drafted this many tokens...
    min_window_verifies: int = 2  # ...over at least this many verifies (one is too noisy)
    reprobe_after: int = 128  # plain steps before the first probe after a trip
    reprobe_max: int = 1024  # backoff cap (doubles per failed probe)
    probe_steps: int = 4  # verifies in a probe
    scale_alpha: float = 0.2  # EWMA weight of one timing sample
    scale_min: float = 0.25
    scale_max: float = 4.0
    min_draft: int = 2
    max_draft: int = 16
    #: Confidence edges of the lanes (LaneGate): lane i holds drafts whose source match length is
    #: in [lanes[i-1], lanes[i]). () = one lane, the design record's single gate.
    lanes: tuple[int, ...] = (4, 12)
    #: Per-token acceptance expected of lowest-lane drafts (SAM matches of 2-3 tokens): 18% on the
    #: Spec-Bench dev answers (``python -m fucina.bench.replay --from-bench --no-recycling``). When
    #: the cost table's break-even for that lane's first draft is higher, the lane starts resting.
    short_match_acceptance: float = 0.18

    def __post_init__(self) -> None:
        if not 0.0 <= self.short_match_acceptance <= 1.0:
            raise InvalidOption(f"short_match_acceptance must be in [0, 1], got {self.short_match_acceptance}")
        lanes = self.lanes
        if not isinstance(lanes, tuple) or any(not isinstance(e, int) or isinstance(e, bool) or e < 1 for e in lanes):
            raise InvalidOption(f"lanes must be a tuple of ints >= 1, got {lanes!r}")
        if any(a >= b for a, b in zip(lanes, lanes[1:])):
            raise InvalidOption(f"lanes must be strictly increasing, got {lanes!r}")
        if self.min_window_verifies < 1:
            raise InvalidOption(f"min_window_verifies must be >= 1, got {self.min_window_verifies}")
        if self.rate_window < max(2, self.min_window_verifies, self.probe_steps):
            raise RateWindowTooSmall(
                f"rate_window={self.rate_window} must hold >= max(2, min_window_verifies, probe_steps) verifies"
            )
        if self.probe_steps < 1:
            raise ProbeStepsZero("probe_steps must be >= 1: a zero-verify probe can never re-enable speculation")
        if self.reprobe_after < 1:
            raise ReprobeAfterZero("reprobe_after must be >= 1 plain step")
        if self.reprobe_max < self.reprobe_after:
            raise InvalidOption(f"reprobe_max={self.reprobe_max} must be >= reprobe_after={self.reprobe_after}")
        if not (self.min_speedup > 0 and math.isfinite(self.min_speedup)):
            raise InvalidOption(f"min_speedup must be finite and > 0, got {self.min_speedup}")
        if not (0 <= self.probe_margin < 10):
            raise InvalidOption(f"probe_margin must be in [0, 10), got {self.probe_margin}")
        if self.min_window_drafted < 1:
            raise InvalidOption(f"min_window_drafted must be >= 1, got {self.min_window_drafted}")
        if not 0 < self.scale_alpha <= 1:
            raise InvalidOption(f"scale_alpha must be in (0, 1], got {self.scale_alpha}")
        if not 0 < self.scale_min <= 1 <= self.scale_max:
            raise InvalidOption(f"need 0 < scale_min <= 1 <= scale_max, got [{self.scale_min}, {self.scale_max}]")
        if self.min_draft < 1:
            raise InvalidOption(f"min_draft must be >= 1, got {self.min_draft}")
        if self.max_draft < self.min_draft:
            raise InvalidOption(f"max_draft={self.max_draft} must be >= min_draft={self.min_draft}")


@dataclass
class _Verify:
    drafted: int
    committed: int
    cost: float


class CostGate:
    """The verify-economics gate. The decoder calls :meth:`should_speculate` before each step,
    :meth:`record_verify` after each verify and :meth:`record_plain` after each plain step."""

    def __init__(self, table: CostTable, options: GateOptions | None = None) -> None:
        self.table = table
        self.options = options or GateOptions()
        self.state = GateState.ON
        self.scale = 1.0  # live multiplier on the table
        self.plain_seconds: float | None = None  # EWMA of one plain step
        self._window: deque[_Verify] = deque(maxlen=self.options.rate_window)
        self._rest = 0  # plain steps left before the next probe
        self._backoff = self.options.reprobe_after
        self._probe_done = 0
        self.trips = 0
        self.probes = 0
        self.last_estimate: float | None = None
        # longest[k]: the longest draft (<= max_draft) the table prices no higher than k drafts.
        # The table is fixed, so this is computed once, not on every step's budget().
        o = self.options
        self._longest = {k: max(j for j in range(k, o.max_draft + 1) if table.cost(j + 1) <= table.cost(k + 1))
                         for k in range(o.min_draft, o.max_draft + 1)}

    # -- decisions ---------------------------------------------------------------------------
    def should_speculate(self) -> bool:
        return self.state is not GateState.OFF

    def budget(self) -> int:
        """Draft budget: max(min_draft, 2 + ceil(acceptance * max_draft)) over the window, then
        lengthened to the longest draft (<= max_draft) the table prices no higher.

        With no evidence yet (start, or a fresh probe) acceptance counts as 0, so the first verifies
        are the short ones. Acceptance is taken over at least ``min_window_drafted`` tokens (the
        same thin-window rule the estimate uses): one accepted 2-token draft ramps the budget to
        ~6, not straight to max_draft — on this CPU a missed 16-token verify costs 4-7 plain steps.
        The lengthening is free on a non-monotonic CPU curve (e.g. verify-8 measured cheaper than
        verify-5): a longer draft's accepted prefix is never shorter, and the table says it costs
        no more.
        """
        o = self.options
        drafted = sum(v.drafted for v in self._window)
        if drafted == 0:
            k = min(o.max_draft, max(o.min_draft, 2))
        else:
            accepted = sum(max(0, v.committed - 1) for v in self._window)
            # A thin window (< min_window_drafted tokens) is not yet evidence of full acceptance.
            k = min(o.max_draft, max(o.min_draft, 2 + math.ceil(accepted / max(drafted, o.min_window_drafted) * o.max_draft)))
        return self._longest[k]

    def verify_cost(self, rows: int) -> float:
        """Cost of a verify over ``rows`` tokens: table * live scale, never < 1 plain step."""
        return max(1.0, self.table.cost(rows) * self.scale)

    def estimate(self) -> float | None:
        """committed / cost over the window, or None while the window is too thin to judge."""
        o = self.options
        if len(self._window) < o.min_window_verifies or sum(v.drafted for v in self._window) < o.min_window_drafted:
            return None
        return sum(v.committed for v in self._window) / sum(v.cost for v in self._window)

    # -- observations ------------------------------------------------------------------------
    def record_plain(self, seconds: float | None = None) -> None:
        """A plain (or fallback) step happened; it never enters the window."""
        if seconds is not None and seconds > 0:
            a = self.options.scale_alpha
            self.plain_seconds = seconds if self.plain_seconds is None else (1 - a) * self.plain_seconds + a * seconds
        if self.state is GateState.OFF:
            self._rest -= 1
            if self._rest <= 0:
                self.state = GateState.PROBING
                self.probes += 1
                self._probe_done = 0
                self._window.clear()  # a probe judges fresh evidence only

    def record_verify(self, drafted: int, committed: int, seconds: float | None = None) -> None:
        """A verify of ``drafted`` tokens committed ``committed`` (accepted + correction/bonus)."""
        o = self.options
        rows = drafted + 1
        if seconds is not None and seconds > 0 and self.plain_seconds:
            # observed/table ratio moves the multiplier by alpha of its clamped deviation.
            ratio = (seconds / self.plain_seconds) / self.table.cost(rows)
            ratio = min(o.scale_max, max(o.scale_min, ratio))
            self.scale = min(o.scale_max, max(o.scale_min, (1 - o.scale_alpha) * self.scale + o.scale_alpha * ratio))
        self._window.append(_Verify(drafted, committed, self.verify_cost(rows)))
        est = self.estimate()
        self.last_estimate = est
        if self.state is GateState.PROBING:
            self._probe_done += 1
            if self._probe_done < o.probe_steps or est is None:
                return
            if est >= o.min_speedup + o.probe_margin:
                self.state = GateState.ON
                self._backoff = o.reprobe_after  # a passed probe restarts the backoff
            else:
                self._trip(double=True)
        elif self.state is GateState.ON and est is not None and est < o.min_speedup:
            self._trip(double=False)

    def rest(self) -> None:
        """Start resting (reprobe_after plain steps, then a probe) without counting a trip."""
        self.state = GateState.OFF
        self._rest = self._backoff

    def _trip(self, double: bool) -> None:
        o = self.options
        if double:
            self._backoff = min(o.reprobe_max, self._backoff * 2)
        self.state = GateState.OFF
        self.trips += 1
        self._rest = self._backoff

    def __str__(self) -> str:
        est = "-" if self.last_estimate is None else f"{self.last_estimate:.2f}"
        return f"gate={self.state.value} est={est}x scale={self.scale:.2f} trips={self.trips} probes={self.probes}"


def lane_index(edges: tuple[int, ...], confidence: int | None) -> int:
    """Lane of a draft with this confidence (match length) under ``edges``; None -> lane 0."""
    return 0 if confidence is None else bisect.bisect_right(edges, confidence)


def lane_label(edges: tuple[int, ...], lane: int) -> str:
    """A lane's match-length range, e.g. ``m0-3``, ``m4-11``, ``m12+`` for edges (4, 12)."""
    lo = edges[lane - 1] if lane else 0
    return f"m{lo}-{edges[lane] - 1}" if lane < len(edges) else f"m{lo}+"


class LaneGate:
    """One :class:`CostGate` per confidence lane, sharing the live cost scale.

    Why lanes: a verify's odds depend on the draft's confidence. On this CPU a 2-token verify costs
    ~2 plain steps, so short-match guesses (accepted ~30% per token) lose, while drafts from 8+
    token matches are usually accepted whole. Under one window the early short-match losses trip
    the gate, and the long matches that follow (a question's numbers, a passage being quoted)
    are never drafted. Each lane keeps the design record's state machine, window, hysteresis and
    backoff; a step spent in another lane counts as a disabled step for a resting lane.

    The lowest lane starts resting (a probe after ``reprobe_after`` steps, like a tripped gate) when
    the table prices its first draft above what short matches are expected to reach
    (``short_match_acceptance``): on this CPU a 2-token verify needs 54% acceptance, short SAM
    matches give ~18%, so opening with them would only pay probe losses. On a table where short
    verifies are cheap it starts on, as in the design record.

    ``confidence`` is the draft source's match length (``DraftSource.confidence()``); ``None`` (a
    source that cannot say) always maps to lane 0. With ``options.lanes == ()`` or
    ``use_lanes=False`` this is exactly the single CostGate.
    """

    def __init__(self, table: CostTable, options: GateOptions | None = None, use_lanes: bool = True) -> None:
        o = self.options = options or GateOptions()
        self.edges = o.lanes if use_lanes else ()
        self.lanes = [CostGate(table, o) for _ in range(len(self.edges) + 1)]
        self.cold_start = bool(self.edges) and table.break_even(o.min_draft + 1) > o.short_match_acceptance
        if self.cold_start:
            self.lanes[0].rest()
        self._last = 0  # lane of the last decision, for ``state``

    def lane_of(self, confidence: int | None) -> int:
        return lane_index(self.edges, confidence)

    def should_speculate(self, confidence: int | None = None) -> bool:
        self._last = self.lane_of(confidence)
        return self.lanes[self._last].should_speculate()

    def budget(self, confidence: int | None = None) -> int:
        return self.lanes[self.lane_of(confidence)].budget()

    def record_plain(self, seconds: float | None = None) -> None:
        for lane in self.lanes:
            lane.record_plain(seconds)

    def record_verify(self, drafted: int, committed: int, seconds: float | None = None,
                      confidence: int | None = None) -> None:
        i = self.lane_of(confidence)
        used = self.lanes[i]
        used.record_verify(drafted, committed, seconds)
        for j, lane in enumerate(self.lanes):
            if j != i:
                lane.scale = used.scale  # the machine's verify/plain ratio is one fact, not per lane
                lane.record_plain(None)  # a step it sat out: counts toward its re-probe

    # -- summaries for stats lines and benches ----------------------------------------------------
    @property
    def state(self) -> GateState:
        """State of the lane the last decision consulted."""
        return self.lanes[self._last].state

    @property
    def scale(self) -> float:
        return self.lanes[0].scale

    @property
    def trips(self) -> int:
        return sum(g.trips for g in self.lanes)

    @property
    def probes(self) -> int:
        return sum(g.probes for g in self.lanes)

    def __str__(self) -> str:
        if len(self.lanes) == 1:
            return str(self.lanes[0])
        parts = []
        for i, g in enumerate(self.lanes):
            lo = self.edges[i - 1] if i else 0
            est = "-" if g.last_estimate is None else f"{g.last_estimate:.2f}x"
            parts.append(f"m{lo}+:{g.state.value}/{est}")
        return f"gate=[{' '.join(parts)}] scale={self.scale:.2f} trips={self.trips} probes={self.probes}"
