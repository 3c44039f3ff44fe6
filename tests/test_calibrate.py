"""How a verify cost table is measured (fucina.calibrate), on a fake model with a fake clock.

The fake machine: a forward of n rows takes ``1 + 0.25 (n - 1)`` units, and a single step right after a
forward of 16+ rows takes 1.5 units instead of 1 (a slow step after a large batch, as an AMD EPYC
showed: 55-82 ms after a 64-row forward against 40 ms). A decoder pays that half unit for every such
verify, so the table must: C(n) = 1 + 0.25 (n - 1) below 16 rows, that + 0.5 from 16.
"""

from __future__ import annotations

import pytest

from fucina.backends.fake import FakeModel
from fucina.calibrate import measure_cost_table, time_forwards


class TimedFake(FakeModel):
    """A FakeModel whose forwards advance ``now`` by the fake machine's time."""

    def __init__(self, slow_after: int = 16) -> None:
        super().__init__()
        self.now = 0.0
        self.slow_after = slow_after
        self._last_rows = 1

    def clock(self) -> float:
        return self.now

    def forward_step_all_logits(self, tokens):
        n = len(tokens)
        cost = 1.0 + 0.25 * (n - 1)
        if n == 1 and self._last_rows >= self.slow_after:
            cost = 1.5
        self.now += cost
        self._last_rows = n
        return super().forward_step_all_logits(tokens)


def expected(n: int) -> float:
    return 1.0 + 0.25 * (n - 1) + (0.5 if n >= 16 else 0.0)


def test_the_step_after_a_large_forward_is_charged_to_it():
    model = TimedFake()
    times = time_forwards(model, (1, 2, 4, 16, 64), repeats=2, prompt=list(range(40, 80)), clock=model.clock)
    for n in (1, 2, 4, 16, 64):
        assert times[n] == pytest.approx([expected(n)] * 2), n
    assert model.kv_len == 0


def test_the_plain_step_is_timed_after_a_plain_step():
    # The method this replaced timed each single step right after the largest forward: 1.5 units
    # here, which priced every verify at two thirds of its cost. Interleaving must not do that.
    model = TimedFake(slow_after=8)
    table = measure_cost_table(model, (2, 8, 49), repeats=3, prompt=list(range(40, 80)), clock=model.clock)
    assert table.cost(2) == pytest.approx(1.25)
    assert table.cost(8) == pytest.approx(1.0 + 0.25 * 7 + 0.5)
    assert table.cost(49) == pytest.approx(1.0 + 0.25 * 48 + 0.5)


def test_n_one_is_the_reference_even_when_not_asked_for():
    model = TimedFake()
    times = time_forwards(model, (4,), repeats=1, prompt=list(range(40, 60)), clock=model.clock)
    assert set(times) == {4} and times[4] == pytest.approx([expected(4)])
