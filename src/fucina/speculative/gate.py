"""CostGate: decides WHEN to speculate, never WHAT is committed (design record §3-§4).

est_speedup = committed tokens / verify cost in plain-step equivalents, over a rolling window of
verifies (plain and fallback steps never enter it: only verifies can lose time). Verify cost is a
measured :class:`CostTable` scaled by a live multiplier learned from verify/plain timings with a
clamped EWMA, so one noisy timing cannot flip the gate while a table from another machine is
corrected within a few verifies. With no clock the table alone applies.
"""

from __future__ import annotations

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

    def __post_init__(self) -> None:
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

    # -- decisions ---------------------------------------------------------------------------
    def should_speculate(self) -> bool:
        return self.state is not GateState.OFF

    def budget(self) -> int:
        """Draft budget: max(min_draft, 2 + ceil(acceptance * max_draft)) over the window.

        With no evidence yet (start, or a fresh probe) acceptance counts as 0: the first verifies
        are the cheap ones, so a source that misses costs little, and one that hits reaches
        max_draft after a single fully accepted verify.
        """
        o = self.options
        drafted = sum(v.drafted for v in self._window)
        if drafted == 0:
            return min(o.max_draft, max(o.min_draft, 2))
        accepted = sum(max(0, v.committed - 1) for v in self._window)
        return min(o.max_draft, max(o.min_draft, 2 + math.ceil(accepted / drafted * o.max_draft)))

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
