"""DraftPolicy and cost tables: validation, the choice of k, candidate scoring, the floor, live rescale."""

import math
import random

import pytest

from fucina.errors import CostTableEmpty, InvalidOption
from fucina.speculative.costs import CostTable
from fucina.speculative.policy import (E_EDGES, PRIOR_ACCEPTANCE, DraftPolicy, PolicyOptions, draft_bucket,
                                       e_bucket, e_label, kind_of)

TABLE = CostTable(((2, 1.6), (4, 2.5), (8, 4.4), (16, 7.3)), "test")
FLAT = CostTable(tuple((n, 1 + 0.03 * (n - 1)) for n in range(2, 34)), "flat")


@pytest.mark.parametrize("kwargs", [
    dict(min_gain=-0.1), dict(min_gain=float("nan")), dict(min_draft=0), dict(max_draft=1),
    dict(min_draft=True), dict(prior_weight=0), dict(prior_weight=float("inf")), dict(memory=1),
    dict(memory=2.5), dict(scale_alpha=0), dict(scale_min=2.0), dict(scale_max=0.5),
])
def test_degenerate_options_raise_named_errors(kwargs):
    with pytest.raises(InvalidOption):
        PolicyOptions(**kwargs)


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


def test_buckets_and_labels():
    assert len(PRIOR_ACCEPTANCE) == len(E_EDGES) + 1
    assert [e_bucket(e) for e in (0, 1, 7, 8, 11, 12, 31, 32, 500)] == [0, 1, 7, 8, 8, 9, 11, 12, 12]
    assert [e_label(b) for b in (0, 1, 8, 9, 12)] == ["m0", "m1", "m8-11", "m12-15", "m32+"]
    assert [draft_bucket(5, j) for j in (1, 3, 4)] == [5, 7, 8] and draft_bucket(0, 9) == 0
    assert kind_of("ref0") == kind_of("ref7") == "reference"
    assert kind_of("conversation") == "conversation" and kind_of(None) == "draft"


def expected_value(policy, kind, base, k):
    """Brute force of (E[accepted | k] + 1) / C(k + 1)."""
    e, surv = 0.0, 1.0
    for j in range(1, k + 1):
        surv *= policy.acceptance(kind, base + j - 1)
        e += surv
    return (e + 1) / policy.verify_cost(k + 1)


@pytest.mark.parametrize("table", [TABLE, FLAT], ids=["cpu", "flat"])
@pytest.mark.parametrize("base", [1, 3, 8, 40])
def test_best_length_is_the_argmax_of_the_value(table, base):
    p = DraftPolicy(table)
    for n in (1, 2, 5, 16, 30):
        k, v = p.best_length(n, base, "conversation")
        values = {j: expected_value(p, "conversation", base, j) for j in range(2, min(n, p.options.max_draft) + 1)}
        if not values or max(values.values()) <= 1.0:
            assert (k, v) == (0, 1.0)
        else:
            assert k == max(values, key=values.get) and v == pytest.approx(values[k])


def test_choose_declines_what_the_table_prices_as_a_loss_and_verifies_what_pays():
    p = DraftPolicy(TABLE)
    assert p.choose([1, 2, 3, 4], 1, "conversation") == 0 and p.declined == 1  # m1: p ~ 0.3
    k = p.choose(list(range(16)), 40, "conversation")  # m40+: p ~ 0.9
    assert k >= 4 and p.chosen == 1
    assert p.choose([], 40, "conversation") == 0 and p.declined == 1  # nothing to decide
    assert p.choose([5], 40, "conversation") == 0  # shorter than min_draft
    assert p.choose([1, 2, 3], 1, "conversation", forced=True) == 3  # the gate-open ablation


def test_candidates_are_scored_against_what_is_committed_later():
    p = DraftPolicy(FLAT, PolicyOptions(memory=10**6))
    p.choose([1, 2, 3, 4], 5, "conversation")  # declined or not, it is scored
    p.observe([1])
    # Each trial is scored as its token is committed, not when the candidate ends.
    assert p.learned() == {"conversation": {"m5": (1, 1)}}
    p.observe([2, 9, 7])  # token 3 missed
    assert p.learned() == {"conversation": {"m5": (1, 1), "m6": (1, 1), "m7": (0, 1)}}
    p.choose([4, 4], 2, "ref1")
    p.observe([4, 4, 4])  # complete: hits only
    assert p.learned()["reference"] == {"m2": (1, 1), "m3": (1, 1)}
    p.choose([1, 2], 2, "ref0")
    p.reset_pending()
    p.observe([1, 2])
    assert p.learned()["reference"] == {"m2": (1, 1), "m3": (1, 1)}  # dropped unscored


def test_a_declined_source_is_verified_once_its_record_says_it_pays():
    """No probes: candidates scored while declined raise the estimate until verifying pays."""
    p = DraftPolicy(TABLE)
    stream = list(range(100, 400))
    decisions = []
    for i in range(0, 200):
        k = p.choose(stream[i: i + 8], 2, "conversation")  # always right, from a short match
        decisions.append(k)
        p.observe(stream[i: i + (k + 1 if k else 1)][:1] if not k else [])
        if k:
            break
    assert decisions[0] == 0 and decisions[-1] >= 2 and len(decisions) < 40, decisions


def test_a_source_that_turns_bad_is_declined_within_its_memory():
    p = DraftPolicy(TABLE, PolicyOptions(memory=32))
    good = list(range(1000))
    for i in range(200):  # a long good run at a high confidence
        p.choose(good[i: i + 8], 20, "conversation")
        p.observe(good[i: i + 1])
    assert p.choose([1, 2, 3, 4, 5, 6, 7, 8], 20, "conversation") > 0
    p.reset_pending()
    turned = None
    for i in range(200):  # now every candidate misses at once
        k = p.choose([7, 7, 7, 7, 7, 7, 7, 7], 20, "conversation")
        p.observe([i % 5])
        if k == 0:
            turned = i
            break
    assert turned is not None and turned < 32, turned


@pytest.mark.parametrize("table", [TABLE, FLAT], ids=["cpu", "flat"])
@pytest.mark.parametrize("base", [1, 4, 12, 40])
def test_floor_garbage_drafts_lose_at_most_a_few_plain_steps(table, base):
    """The never-a-loss floor: candidates that never match cost a bounded handful of verifies,
    whatever confidence they claim (the prior may start optimistic at long matches)."""
    rng = random.Random(base)
    p = DraftPolicy(table)
    loss = 0.0
    for _ in range(2000):
        draft = [rng.randrange(1000, 2000) for _ in range(16)]
        k = p.choose(draft, base, "conversation")
        if k:
            loss += p.verify_cost(k + 1) - 1.0  # committed 1 token (the correction) for C(k+1)
        p.observe([rng.randrange(0, 1000)])
    assert loss <= 12.0, (loss, str(p))


def test_floor_sampled_acceptance_pays_whenever_it_verifies():
    """Candidates accepted with a fixed per-token probability q: over many steps, the realized
    tokens per cost of the verifies chosen is >= 1 (it never verifies at a loss on average)."""
    for q in (0.2, 0.5, 0.8, 0.95):
        rng = random.Random(int(q * 100))
        p = DraftPolicy(TABLE)
        tokens = cost = 0.0
        for _ in range(3000):
            a = 0
            while a < 16 and rng.random() < q:
                a += 1
            draft = [1] * 16
            truth = [1] * a + [2]
            k = p.choose(draft, 6, "conversation")
            got = min(a, k)
            if k:
                tokens += got + 1
                cost += p.verify_cost(k + 1)
            p.observe(truth[: got + 1] if k else truth[:1])
            p.observe(truth[got + 1:] if k else truth[1:])
        if cost:
            assert tokens / cost >= 0.97, (q, tokens / cost)
        if q >= 0.8:
            assert cost > 100  # and it does verify where drafts are good


def test_live_scale_is_clamped_ewma_and_table_alone_without_clock():
    p = DraftPolicy(TABLE)
    p.record_verify(7, seconds=0.05)  # no plain timing yet: nothing to rescale against
    assert p.scale == 1.0
    p.record_plain(0.01)
    p.record_verify(7, seconds=0.01 * TABLE.cost(8) * 2)  # verify twice the table's price
    assert p.scale == pytest.approx(0.8 + 0.2 * 2)
    for _ in range(50):
        p.record_verify(7, seconds=10.0)  # absurd: clamped
    assert p.scale == pytest.approx(4.0, rel=1e-3)
    assert p.verify_cost(8) == pytest.approx(TABLE.cost(8) * 4, rel=1e-3)
    assert DraftPolicy(TABLE).verify_cost(1) == 1.0 and math.isclose(DraftPolicy(TABLE).verify_cost(4), 2.5)


def test_summary_and_str():
    p = DraftPolicy(TABLE)
    p.choose([1, 2], 1, "conversation")
    p.observe([1, 3])
    d = p.summary()
    assert d["declined"] == 1 and d["chosen"] == 0 and d["learned"]["conversation"]["m1"] == [1, 1]
    assert "declined=1" in str(p)


def test_an_acceptance_model_carries_what_one_generation_learned_into_the_next():
    from fucina.speculative.policy import AcceptanceModel

    shared = AcceptanceModel()
    first = DraftPolicy(TABLE, acceptance=shared)
    for i in range(100):  # long-match candidates that always miss
        first.choose([7] * 8, 40, "conversation")
        first.observe([i % 5])
    fresh, second = DraftPolicy(TABLE), DraftPolicy(TABLE, acceptance=shared)
    assert fresh.choose([7] * 8, 40, "conversation") > 0  # the prior of a 40-token match says verify
    assert second.choose([7] * 8, 40, "conversation") == 0  # the shared record says it loses
    assert second.learned() == first.learned() and second.learned()["conversation"]["m32+"][1] == 100
    with pytest.raises(InvalidOption):
        AcceptanceModel(memory=1)


def test_a_sampled_generation_learns_apart_from_greedy_ones_sharing_its_model():
    from fucina.speculative.policy import SAMPLED_SUFFIX, AcceptanceModel

    shared = AcceptanceModel(memory=10**6)
    greedy = DraftPolicy(FLAT, acceptance=shared)
    for i in range(40):  # greedy calls copied: every candidate right
        greedy.choose([i, i + 1], 8, "conversation")
        greedy.observe([i, i + 1])
    sampled = DraftPolicy(FLAT, acceptance=shared, sampled=True)
    assert sampled.kind_suffix == SAMPLED_SUFFIX
    # The sampled call starts from the priors, not from the greedy record ...
    assert sampled.acceptance("conversation" + SAMPLED_SUFFIX, 8) == pytest.approx(PRIOR_ACCEPTANCE[8])
    assert greedy.acceptance("conversation", 8) > 0.9
    sampled.choose([1, 2], 8, "conversation")
    sampled.observe([7])
    assert shared.learned()["conversation" + SAMPLED_SUFFIX] == {"m8-11": (0, 1)}
    # ... unless the split is switched off (the match_only ablation): then both are one kind.
    joined = DraftPolicy(FLAT, PolicyOptions(split_sampled=False), acceptance=shared, sampled=True)
    assert joined.kind_suffix == ""
