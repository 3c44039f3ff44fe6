"""CostGate and cost tables: validation, economics, hysteresis, backoff, live rescale."""

import math

import pytest

from fucina.errors import (CostTableEmpty, InvalidOption, ProbeStepsZero, RateWindowTooSmall,
                           ReprobeAfterZero)
from fucina.speculative.costs import CostTable
from fucina.speculative.gate import CostGate, GateOptions, GateState, LaneGate, lane_label

TABLE = CostTable(((2, 1.6), (4, 2.5), (8, 4.4), (16, 7.3)), "test")


@pytest.mark.parametrize("kwargs,err", [
    (dict(rate_window=1), RateWindowTooSmall),
    (dict(rate_window=3, probe_steps=4), RateWindowTooSmall),
    (dict(probe_steps=0), ProbeStepsZero),
    (dict(reprobe_after=0), ReprobeAfterZero),
    (dict(reprobe_max=64, reprobe_after=128), InvalidOption),
    (dict(min_speedup=0), InvalidOption),
    (dict(min_speedup=float("nan")), InvalidOption),
    (dict(scale_alpha=0), InvalidOption),
    (dict(scale_min=2.0), InvalidOption),
    (dict(min_draft=0), InvalidOption),
    (dict(max_draft=1), InvalidOption),
    (dict(probe_margin=-0.1), InvalidOption),
    (dict(min_window_drafted=0), InvalidOption),
    (dict(lanes=(4, 4)), InvalidOption),
    (dict(lanes=(8, 4)), InvalidOption),
    (dict(lanes=(0, 4)), InvalidOption),
    (dict(lanes=[4, 8]), InvalidOption),
    (dict(short_match_acceptance=1.5), InvalidOption),
])
def test_degenerate_options_raise_named_errors(kwargs, err):
    with pytest.raises(err):
        GateOptions(**kwargs)


def test_cost_table_validation_and_interpolation():
    with pytest.raises(CostTableEmpty):
        CostTable(())
    with pytest.raises(InvalidOption):
        CostTable(((4, -1.0),))
    with pytest.raises(InvalidOption):
        CostTable(((4, 2.0), (4, 3.0)))
    assert TABLE.cost(1) == 1.0
    assert TABLE.cost(4) == 2.5
    assert TABLE.cost(6) == pytest.approx((2.5 + 4.4) / 2)  # interpolated
    assert TABLE.cost(3) == pytest.approx((1.6 + 2.5) / 2)
    assert TABLE.cost(32) == pytest.approx(7.3 + (7.3 - 4.4) / 8 * 16)  # last slope
    assert TABLE.break_even(8) == pytest.approx((4.4 - 1) / 7)
    assert CostTable.from_json(TABLE.to_json()) == TABLE


def test_non_monotonic_table_is_kept_as_measured():
    t = CostTable(((2, 1.65), (4, 1.42), (8, 2.84)))
    assert t.cost(4) < t.cost(2)


def test_cost_table_save_load(tmp_path):
    p = tmp_path / "t.json"
    TABLE.save(p)
    assert CostTable.load(p) == TABLE
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(InvalidOption):
        CostTable.load(tmp_path / "bad.json")


def test_trips_on_a_clear_loss_and_backs_off_exponentially():
    o = GateOptions(reprobe_after=4, reprobe_max=16, probe_steps=2)
    g = CostGate(TABLE, o)
    # verify-8 (7 drafts) committing 1 token each: est = 1 / 3.9 -> trips after the window fills.
    g.record_verify(7, 1)
    assert g.state is GateState.ON  # 7 drafted < 8: too thin to judge
    g.record_verify(7, 1)
    assert g.state is GateState.OFF and g.trips == 1
    rests = []
    for _ in range(3):
        n = 0
        while g.state is GateState.OFF:
            g.record_plain()
            n += 1
        rests.append(n)
        assert g.state is GateState.PROBING
        g.record_verify(7, 1)
        g.record_verify(7, 1)  # failed probe
    assert rests == [4, 8, 16]
    n = 0
    while g.state is GateState.OFF:
        g.record_plain()
        n += 1
    assert n == 16  # capped at reprobe_max


def test_passed_probe_reenables_and_resets_backoff():
    o = GateOptions(reprobe_after=4, reprobe_max=64, probe_steps=2)
    g = CostGate(TABLE, o)
    g.record_verify(7, 1); g.record_verify(7, 1)
    for _ in range(4):
        g.record_plain()
    g.record_verify(7, 1); g.record_verify(7, 1)  # fail -> backoff 8
    for _ in range(8):
        g.record_plain()
    assert g.state is GateState.PROBING
    g.record_verify(7, 8); g.record_verify(7, 8)  # 16 committed / 8.8 cost = 1.8 >= 1.1
    assert g.state is GateState.ON
    g.record_verify(7, 1); g.record_verify(7, 1); g.record_verify(7, 1); g.record_verify(7, 1)
    g.record_verify(7, 1); g.record_verify(7, 1)
    assert g.state is GateState.OFF
    n = 0
    while g.state is GateState.OFF:
        g.record_plain()
        n += 1
    assert n == 4  # back at the base


def test_hysteresis_probe_needs_margin():
    o = GateOptions(reprobe_after=1, probe_steps=2, probe_margin=0.1)
    g = CostGate(CostTable(((8, 4.0),)), o)
    g.record_verify(7, 1); g.record_verify(7, 1)
    g.record_plain()
    assert g.state is GateState.PROBING
    g.record_verify(7, 4); g.record_verify(7, 4.2)  # est = 8.2/8 = 1.025: >= 1.0 but < 1.1
    assert g.state is GateState.OFF


def test_marginal_regime_stays_on():
    g = CostGate(CostTable(((8, 4.0),)))
    for _ in range(10):
        g.record_verify(7, 4)  # est exactly 1.0 -> keep speculating
    assert g.state is GateState.ON and g.last_estimate == pytest.approx(1.0)


def test_adaptive_budget():
    g = CostGate(TABLE, GateOptions(max_draft=16))
    assert g.budget() == 2  # nothing seen yet: acceptance counts as 0
    g.record_verify(8, 5)  # 4 of 8 accepted -> 2 + ceil(0.5 * 16) = 10
    assert g.budget() == 10
    thin = CostGate(TABLE, GateOptions(max_draft=16))
    thin.record_verify(2, 3)  # 2 of 2 accepted: a thin window counts as 2 of min_window_drafted=8
    assert thin.budget() == 2 + math.ceil(2 / 8 * 16) == 6
    g2 = CostGate(TABLE, GateOptions(max_draft=16, min_draft=3))
    g2.record_verify(8, 1)
    assert g2.budget() == 3 and max(3, 2 + math.ceil(0)) == 3


def test_live_scale_is_clamped_ewma_and_table_alone_without_clock():
    g = CostGate(TABLE)
    g.record_verify(3, 2)
    assert g.scale == 1.0  # no timings: the table alone
    g.record_plain(0.010)
    g.record_verify(3, 2, seconds=0.100)  # observed 10 plain steps vs table 2.5 -> ratio 4 (clamped)
    assert g.scale == pytest.approx(0.8 * 1.0 + 0.2 * 4.0)
    for _ in range(200):
        g.record_verify(3, 2, seconds=10.0)
    assert g.scale == pytest.approx(4.0)  # clamp
    for _ in range(200):
        g.record_verify(3, 2, seconds=1e-9)
    assert g.scale == pytest.approx(0.25)
    assert g.verify_cost(2) == 1.0  # a verify never costs < 1 plain step


def test_one_noisy_sample_cannot_flip_a_winning_gate():
    g = CostGate(TABLE)
    g.record_plain(0.01)
    for _ in range(8):
        g.record_verify(7, 8, seconds=0.044)  # matches the table: est ~ 8/4.4
    g.record_verify(7, 8, seconds=5.0)  # a scheduler stall
    assert g.state is GateState.ON


def test_budget_lengthens_along_a_non_monotonic_table():
    # verify-8 cheaper than verify-5 (as measured on this CPU): a 4-draft budget grows for free, up
    # to 9 drafts (cost(10) interpolates to 3.32 <= cost(5) = 3.33).
    t = CostTable(((2, 1.75), (3, 2.08), (4, 2.27), (5, 3.33), (6, 3.68), (8, 2.95), (16, 4.42)))
    g = CostGate(t, GateOptions(max_draft=16))
    assert g.budget() == 2  # nothing longer costs <= cost(3)
    g.record_verify(8, 2)  # 1/8 accepted -> 2 + ceil(2) = 4 -> lengthened
    assert g.budget() == 9 and t.cost(10) <= t.cost(5) < t.cost(11)
    assert CostGate(TABLE).budget() == 2  # monotonic table: the formula alone


# -- LaneGate --------------------------------------------------------------------------------------
WARM = GateOptions(lanes=(4, 12), short_match_acceptance=1.0)  # no cold start: every lane opens on


def test_losing_short_matches_do_not_silence_long_ones():
    g = LaneGate(TABLE, WARM)
    assert [g.lane_of(c) for c in (None, 0, 3, 4, 11, 12, 99)] == [0, 0, 0, 1, 1, 2, 2]
    assert [lane_label(g.edges, i) for i in range(3)] == ["m0-3", "m4-11", "m12+"]
    for _ in range(2):
        assert g.should_speculate(2)
        g.record_verify(7, 1, confidence=2)  # short matches lose
    assert not g.should_speculate(2) and g.trips == 1
    assert g.should_speculate(5) and g.should_speculate(20)  # the other lanes still open
    for _ in range(4):
        g.record_verify(7, 8, confidence=20)
    assert g.should_speculate(20) and g.lanes[2].last_estimate > 1.5
    assert not g.should_speculate(2)


def test_a_resting_lane_counts_other_lanes_steps():
    g = LaneGate(TABLE, GateOptions(lanes=(4,), reprobe_after=4, probe_steps=2, short_match_acceptance=1.0))
    g.record_verify(7, 1, confidence=2); g.record_verify(7, 1, confidence=2)
    assert g.lanes[0].state is GateState.OFF
    g.record_verify(7, 8, confidence=9); g.record_verify(7, 8, confidence=9)  # two steps elsewhere
    g.record_plain(); g.record_plain()
    assert g.lanes[0].state is GateState.PROBING  # 4 steps rested, whichever lane made them


def test_lanes_share_the_live_scale():
    g = LaneGate(TABLE, WARM)
    g.record_plain(0.010)
    g.record_verify(3, 2, seconds=0.100, confidence=20)
    assert g.lanes[0].scale == g.lanes[1].scale == g.lanes[2].scale == pytest.approx(1.6)


def test_cold_start_follows_the_cost_table():
    cpu = CostTable(((3, 2.08), (8, 2.95), (16, 4.42)))  # a 2-draft verify needs 54% acceptance
    gpu = CostTable(((3, 1.05), (8, 1.2), (16, 1.5)))  # needs 2.5%
    opts = GateOptions(lanes=(4, 12), reprobe_after=8)
    cold = LaneGate(cpu, opts)
    assert cold.cold_start and not cold.should_speculate(2) and cold.should_speculate(4)
    assert cold.trips == 0  # resting is not a trip
    for _ in range(8):
        cold.record_plain()
    assert cold.should_speculate(2) and cold.lanes[0].state is GateState.PROBING
    warm = LaneGate(gpu, opts)
    assert not warm.cold_start and warm.should_speculate(2)
    assert not LaneGate(cpu, GateOptions(lanes=())).cold_start  # one lane: the design's gate


def test_single_lane_is_the_cost_gate():
    """use_lanes=False (a source without confidence) behaves exactly like one CostGate."""
    g, ref = LaneGate(TABLE, GateOptions(), use_lanes=False), CostGate(TABLE, GateOptions())
    script = [(7, 1), (7, 1)] + [None] * 130 + [(7, 8)] * 4 + [(3, 1)] * 10
    for ev in script:
        for x in (g, ref):
            if ev is None:
                x.record_plain()
            else:
                x.record_verify(*ev)
        assert g.should_speculate(50) == ref.should_speculate() and g.budget(50) == ref.budget()
        assert g.state is ref.state and (g.trips, g.probes) == (ref.trips, ref.probes)
    assert str(g) == str(ref)
