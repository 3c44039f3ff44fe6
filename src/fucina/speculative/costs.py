"""Verify cost tables: what one batched forward over n tokens costs, in plain-step equivalents.

Keyed by n = rows in the forward (the carried token plus the draft), so cost(1) == 1 by definition.
The curve is measured per model and machine (``fucina calibrate``) because it is neither linear
nor monotonic on CPU kernels; between measured points it is interpolated linearly, and past the
last point extrapolated with the last segment's slope (never below 1 plain step).
"""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from fucina.errors import CostTableEmpty, InvalidOption


@dataclass(frozen=True)
class CostTable:
    """Measured (n, cost) points, sorted by n; ``cost(n)`` interpolates."""

    points: tuple[tuple[int, float], ...]
    #: Free text saying where the figures came from (model, machine, date, command).
    source: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.points:
            raise CostTableEmpty("a cost table needs at least one measured (n, cost) point")
        pts = sorted((int(n), float(c)) for n, c in self.points)
        for n, c in pts:
            if n < 1:
                raise InvalidOption(f"cost table rows must be >= 1, got n={n}")
            if not (c > 0 and math.isfinite(c)):
                raise InvalidOption(f"cost table costs must be finite and > 0, got cost({n})={c}")
        ns = [n for n, _ in pts]
        if len(set(ns)) != len(ns):
            raise InvalidOption(f"cost table has duplicate rows: {ns}")
        object.__setattr__(self, "points", tuple(pts))

    def cost(self, n: int) -> float:
        """Plain-step equivalents of one forward over ``n`` tokens (>= 1)."""
        pts = self.points
        if n <= 1:
            return 1.0
        ns = [p[0] for p in pts]
        i = bisect.bisect_left(ns, n)
        if i < len(pts) and ns[i] == n:
            c = pts[i][1]
        elif len(pts) == 1:
            c = pts[0][1] * n / pts[0][0]  # one point: scale proportionally
        elif i == 0:
            (n0, c0), (n1, c1) = (1, 1.0), pts[0]
            c = c0 + (c1 - c0) * (n - n0) / (n1 - n0)
        else:
            j = min(i, len(pts) - 1)
            (n0, c0), (n1, c1) = pts[j - 1], pts[j]
            c = c0 + (c1 - c0) * (n - n0) / (n1 - n0)
        return max(1.0, c)

    def break_even(self, n: int) -> float:
        """Acceptance a draft of n-1 tokens needs to tie plain decoding: (cost - 1) / (n - 1).

        A verify commits accepted + 1 tokens (the correction/bonus is free), so it wins iff
        accepted + 1 > cost(n).
        """
        return 0.0 if n <= 1 else max(0.0, (self.cost(n) - 1.0) / (n - 1))

    def to_json(self) -> str:
        return json.dumps({"points": [[n, c] for n, c in self.points], "source": self.source}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "CostTable":
        try:
            data = json.loads(text)
            return cls(tuple((int(n), float(c)) for n, c in data["points"]), str(data.get("source", "")))
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidOption(f"not a cost table: {exc}") from exc

    @classmethod
    def load(cls, path: str | Path) -> "CostTable":
        try:
            return cls.from_json(Path(path).read_text())
        except OSError as exc:
            raise InvalidOption(f"cannot read cost table {path}: {exc.strerror}") from exc

    def save(self, path: str | Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(self.to_json())
        tmp.replace(path)  # never a half-written table
