"""Tests of the sampler pipeline (fucina.sampling) against its spec and a naive reference."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fucina import sampling
from benchmarks import sampling as bench
from fucina.errors import FucinaError, InvalidArgument, InvalidOption, InvalidToken
from fucina.sampling import MIN_TEMPERATURE, Sampler, SamplerOptions, argmax, pick_token

SAMPLED = SamplerOptions(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=7)


def reference_pick(logits: np.ndarray, history, opts: SamplerOptions, u: float | None) -> int:
    """The pipeline spelled out over the full vocabulary: no prefilter, no shortcuts."""
    s = [float(x) for x in logits]
    window = list(history)
    if opts.penalty_last_n > 0:
        window = window[-opts.penalty_last_n :]
    if opts.uses_penalties:
        for tok in set(window):
            count = window.count(tok)
            v = s[tok]
            v = v * opts.repeat_penalty if v <= 0 else v / opts.repeat_penalty
            s[tok] = v - (count * opts.frequency_penalty + opts.presence_penalty)
    if opts.temperature <= 0:
        return max(range(len(s)), key=lambda i: (s[i], -i))
    z = np.array(s) / opts.temperature
    order = sorted(range(len(z)), key=lambda i: (-z[i], i))
    if opts.top_k > 0:
        order = order[: opts.top_k]
    zs = z[order]
    cum = list(itertools.accumulate(np.exp(zs - zs[0]).tolist()))
    m = len(order)
    if opts.top_p < 1.0:
        m = next(j for j, c in enumerate(cum) if c >= opts.top_p * cum[-1]) + 1
    if opts.min_p > 0.0:
        m = sum(1 for j in range(m) if zs[j] >= zs[0] + math.log(opts.min_p))
    target = u * cum[m - 1]
    j = next((j for j in range(m) if cum[j] > target), m - 1)
    return order[j]


def fresh_rng(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(seed))


# --- greedy ------------------------------------------------------------------------------------


def test_greedy_is_argmax_and_never_draws() -> None:
    rng = np.random.default_rng(0)
    sampler = Sampler(SamplerOptions(seed=3))
    for _ in range(20):
        row = rng.normal(0, 3, 1000).astype(np.float32)
        assert sampler.sample(row, [1, 2, 3]) == int(np.argmax(row))
    assert sampler.draws == 0
    assert sampler.rng.bit_generator.state == fresh_rng(3).bit_generator.state


def test_greedy_ties_go_to_the_lowest_id() -> None:
    row = np.array([0.0, 2.0, 1.0, 2.0], dtype=np.float32)
    assert argmax(row) == 1
    assert Sampler(SamplerOptions()).sample(row, []) == 1
    assert Sampler(SamplerOptions(temperature=-1.0)).sample(row, []) == 1


# --- exactly one draw per sampled token ----------------------------------------------------------


@pytest.mark.parametrize(
    "opts",
    [
        SAMPLED,
        SamplerOptions(temperature=1.0, seed=7),
        SamplerOptions(temperature=0.5, top_k=1, seed=7),  # one survivor: still one draw
        SamplerOptions(temperature=0.8, top_p=0.01, repeat_penalty=1.3, seed=7),
    ],
)
def test_exactly_one_draw_per_sampled_token(opts: SamplerOptions) -> None:
    rng = np.random.default_rng(1)
    sampler = Sampler(opts)
    shadow = fresh_rng(opts.seed)
    history: list[int] = []
    for n in range(1, 31):
        row = rng.normal(0, 2.5, 5000).astype(np.float32)
        token = sampler.sample(row, history)
        # The draw is the u that the pure pipeline needs to reproduce the pick.
        assert token == pick_token(row, history, opts, shadow.random())
        assert sampler.draws == n
        assert sampler.rng.bit_generator.state == shadow.bit_generator.state
        history.append(token)


def test_a_failed_sample_consumes_no_randomness() -> None:
    opts = SamplerOptions(temperature=1.0, repeat_penalty=1.1, seed=5)
    sampler = Sampler(opts)
    row = np.zeros(100, dtype=np.float32)
    row[5] = np.nan
    with pytest.raises(InvalidArgument):
        sampler.sample(row, [])
    with pytest.raises(InvalidToken):
        sampler.sample(np.zeros(100, dtype=np.float32), [100])
    assert sampler.draws == 0
    assert sampler.rng.bit_generator.state == fresh_rng(opts.seed).bit_generator.state


def test_same_seed_same_stream_and_reset_replays_it() -> None:
    rng = np.random.default_rng(2)
    rows = [rng.normal(0, 1.5, 2000).astype(np.float32) for _ in range(40)]
    opts = SamplerOptions(temperature=1.0, seed=11)

    def stream(sampler: Sampler) -> list[int]:
        return [sampler.sample(row, []) for row in rows]

    first = Sampler(opts)
    a = stream(first)
    assert a == stream(Sampler(opts))
    assert a != stream(Sampler(SamplerOptions(temperature=1.0, seed=12)))
    first.reset()
    assert first.draws == 0
    assert stream(first) == a
    first.reset(seed=12)
    assert stream(first) == stream(Sampler(SamplerOptions(temperature=1.0, seed=12)))


# --- penalties ---------------------------------------------------------------------------------

ROW2 = np.array([2.0, 1.9, -5.0], dtype=np.float32)


def test_repeat_penalty_divides_positive_logits() -> None:
    assert Sampler(SamplerOptions()).sample(ROW2, [0]) == 0
    assert Sampler(SamplerOptions(repeat_penalty=1.1)).sample(ROW2, [0]) == 1  # 2.0/1.1 < 1.9


def test_repeat_penalty_multiplies_negative_logits() -> None:
    row = np.array([-1.0, -1.05], dtype=np.float32)
    # Dividing would lift -1.0 to -0.91 and keep token 0; multiplying sinks it to -1.1.
    assert Sampler(SamplerOptions(repeat_penalty=1.1)).sample(row, [0]) == 1


def test_frequency_penalty_scales_with_the_count() -> None:
    opts = SamplerOptions(frequency_penalty=0.05)
    assert Sampler(opts).sample(ROW2, [0]) == 0  # 2.0 - 0.05 > 1.9
    assert Sampler(opts).sample(ROW2, [0, 0, 0]) == 1  # 2.0 - 0.15 < 1.9


def test_presence_penalty_ignores_the_count() -> None:
    assert Sampler(SamplerOptions(presence_penalty=0.05)).sample(ROW2, [0, 0, 0]) == 0
    assert Sampler(SamplerOptions(presence_penalty=0.15)).sample(ROW2, [0]) == 1


def test_penalties_can_also_promote_a_token() -> None:
    # The raw argmax (token 0) is not in the window; a lifted token 1 must still beat it.
    assert Sampler(SamplerOptions(repeat_penalty=0.9)).sample(ROW2, [1]) == 1  # 1.9/0.9 > 2
    assert Sampler(SamplerOptions(frequency_penalty=-0.06)).sample(ROW2, [1, 1]) == 1
    assert Sampler(SamplerOptions(presence_penalty=-0.06)).sample(ROW2, [1, 1]) == 0
    assert Sampler(SamplerOptions(presence_penalty=-0.2)).sample(ROW2, [2, 1]) == 1


@pytest.mark.parametrize(("row", "lifted"), [([2.0, 1.0], 1), ([1.0, 2.0], 0)])
def test_a_penalized_token_tying_the_max_loses_to_a_lower_id(row: list, lifted: int) -> None:
    row = np.array(row, dtype=np.float32)
    assert Sampler(SamplerOptions(presence_penalty=-1.0)).sample(row, [lifted]) == 0


@pytest.mark.parametrize(
    ("last_n", "expected"),
    [(2, 0), (3, 1), (-1, 1), (0, 0)],  # token 0 sits three back: only windows >= 3 see it
)
def test_penalty_window_covers_only_the_end_of_history(last_n: int, expected: int) -> None:
    opts = SamplerOptions(repeat_penalty=1.1, penalty_last_n=last_n)
    assert Sampler(opts).sample(ROW2, [0, 2, 2]) == expected
    assert Sampler(opts).sample(ROW2, np.array([0, 2, 2])) == expected
    assert Sampler(opts).sample(ROW2, (0, 2, 2)) == expected


def test_penalties_change_a_sampled_pick_on_a_large_vocabulary() -> None:
    rng = np.random.default_rng(3)
    row = rng.normal(0, 2.5, 262_144).astype(np.float32)
    top = int(np.argmax(row))
    row[top] += 20  # near-certain without penalties
    plain = SamplerOptions(temperature=0.8, top_k=40, top_p=0.95)
    penal = SamplerOptions(temperature=0.8, top_k=40, top_p=0.95, presence_penalty=40.0)
    assert pick_token(row, [top], plain, 0.5) == top
    picked = pick_token(row, [top], penal, 0.5)
    assert picked != top
    assert picked == reference_pick(row, [top], penal, 0.5)


# --- truncation: each filter changes the pick for a fixed u --------------------------------------

# z = [2, 1, 0, -1] at T = 1: weights 1, .368, .135, .050; cum 1, 1.368, 1.503, 1.553.
ROW4 = np.array([2.0, 1.0, 0.0, -1.0], dtype=np.float32)


def test_inverse_cdf_walks_the_canonical_order() -> None:
    opts = SamplerOptions(temperature=1.0)
    w = np.exp(np.array([0.0, -1.0, -2.0, -3.0]))
    cum = np.cumsum(w)
    edge = cum[0] / cum[-1]
    assert pick_token(ROW4, [], opts, 0.0) == 0
    assert pick_token(ROW4, [], opts, np.nextafter(edge, 0)) == 0
    assert pick_token(ROW4, [], opts, edge) == 1
    assert pick_token(ROW4, [], opts, 0.99) == 3


def test_top_k_changes_the_pick() -> None:
    assert pick_token(ROW4, [], SamplerOptions(temperature=1.0), 0.99) == 3
    assert pick_token(ROW4, [], SamplerOptions(temperature=1.0, top_k=3), 0.99) == 2
    assert pick_token(ROW4, [], SamplerOptions(temperature=1.0, top_k=2), 0.99) == 1


def test_top_p_changes_the_pick() -> None:
    # 0.9 * 1.553 = 1.398: the prefix ends at the first cum >= that, token 2 (cum 1.503).
    assert pick_token(ROW4, [], SamplerOptions(temperature=1.0, top_p=0.9), 0.99) == 2
    assert pick_token(ROW4, [], SamplerOptions(temperature=1.0, top_p=0.6), 0.99) == 0


def test_min_p_changes_the_pick() -> None:
    assert pick_token(ROW4, [], SamplerOptions(temperature=1.0, min_p=0.2), 0.99) == 1
    assert pick_token(ROW4, [], SamplerOptions(temperature=1.0, min_p=0.1), 0.99) == 2


def test_min_p_boundary_is_inclusive() -> None:
    # log(exp(-1)) == -1.0 exactly, so token 1 sits exactly on the min-p line and must stay.
    opts = SamplerOptions(temperature=1.0, min_p=math.exp(-1.0))
    assert math.log(opts.min_p) == -1.0
    assert pick_token(ROW4, [], opts, 0.99) == 1


def test_temperature_sharpens_the_distribution() -> None:
    assert pick_token(ROW4, [], SamplerOptions(temperature=1.0), 0.9) == 2
    assert pick_token(ROW4, [], SamplerOptions(temperature=0.1), 0.9) == 0


def test_ties_are_ordered_by_ascending_id() -> None:
    row = np.array([0.0, 5.0, 5.0, 0.0], dtype=np.float32)
    assert pick_token(row, [], SamplerOptions(temperature=1.0, top_k=1), 0.99) == 1
    assert pick_token(row, [], SamplerOptions(temperature=1.0, top_k=2), 0.25) == 1
    assert pick_token(row, [], SamplerOptions(temperature=1.0, top_k=2), 0.75) == 2


# --- the fast path equals the naive full-vocabulary pipeline --------------------------------------


def make_row(seed: int, vocab: int, scale: float, quantum: float, masked: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    row = rng.normal(0.0, scale, vocab)
    peaks = rng.choice(vocab, size=min(5, vocab), replace=False)
    row[peaks] += rng.uniform(0, 4 * scale, size=peaks.size)
    if quantum:
        row = np.round(row / quantum) * quantum  # many exact ties
    row = row.astype(np.float32)
    row[rng.choice(vocab, size=min(masked, vocab - 1), replace=False)] = -np.inf
    return row


options_st = st.builds(
    SamplerOptions,
    temperature=st.sampled_from([0.0, 0.05, 0.3, 0.8, 1.0, 2.0, 50.0]),
    top_k=st.sampled_from([0, 0, 1, 3, 40, 10_000]),
    top_p=st.sampled_from([1.0, 1.0, 0.999, 0.95, 0.5]),
    min_p=st.sampled_from([0.0, 0.0, 1e-12, 0.05, 0.5]),
    repeat_penalty=st.sampled_from([1.0, 1.0, 0.7, 1.3, 100.0]),
    frequency_penalty=st.sampled_from([0.0, 0.0, 0.5, -1.0]),
    presence_penalty=st.sampled_from([0.0, 0.0, 3.0, 40.0]),
    penalty_last_n=st.sampled_from([64, -1, 0, 3]),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    vocab=st.sampled_from([1, 2, 7, 300, 4096, 9000]),
    scale=st.sampled_from([0.01, 1.0, 2.5, 15.0, 60.0]),
    quantum=st.sampled_from([0.0, 0.0, 0.5]),
    masked=st.sampled_from([0, 0, 3]),
    opts=options_st,
    u=st.floats(0.0, 1.0, exclude_max=True),
    n_hist=st.integers(0, 80),
    from_top=st.integers(0, 8),
    spare_argmax=st.booleans(),
)
def test_pick_equals_the_naive_full_vocabulary_reference(
    seed, vocab, scale, quantum, masked, opts, u, n_hist, from_top, spare_argmax
) -> None:
    row = make_row(seed, vocab, scale, quantum, masked)
    rng = np.random.default_rng(seed + 1)
    # Penalize some of the best tokens too, so penalties reorder the head of the distribution.
    best = np.argsort(-row, kind="stable")[int(spare_argmax) : from_top]
    history = rng.integers(0, vocab, size=n_hist).tolist() + best.tolist()
    rng.shuffle(history)
    before = row.copy()
    row.setflags(write=False)
    assert pick_token(row, history, opts, u) == reference_pick(row, history, opts, u)
    assert np.array_equal(row, before)


def test_min_p_prefilter_keeps_the_mass_top_p_needs() -> None:
    # Uniform logits over a range of 5: min-p 0.5 drops ~2/3 of the tokens, but their mass still
    # sets where top-p cuts; pruning them first would move the cut and change picks near u = 1.
    row = np.linspace(0.0, 5.0, 5000, dtype=np.float32)[np.random.default_rng(4).permutation(5000)]
    opts = SamplerOptions(temperature=1.0, top_p=0.5, min_p=0.5)
    for u in (0.0, 0.5, 0.99, 0.9999):
        assert pick_token(row, [], opts, u) == reference_pick(row, [], opts, u)


def test_the_prefilter_really_skips_most_of_the_vocabulary(monkeypatch) -> None:
    """Guards the equivalence test from vacuity: the fast path must actually drop tokens."""
    gathered: list[int] = []
    original = sampling._RowIndex.gather

    def spy(self, t, pen_ids, pen_s):
        ids, s = original(self, t, pen_ids, pen_s)
        gathered.append(ids.size)
        return ids, s

    monkeypatch.setattr(sampling._RowIndex, "gather", spy)
    cases = [
        (make_row(5, 262_144, 2.5, 0.0, 0), SamplerOptions(temperature=0.8, top_k=40, top_p=0.95)),
        (make_row(6, 49_152, 60.0, 0.0, 0), SamplerOptions(temperature=1.0, top_p=0.9)),
        (make_row(7, 49_152, 2.5, 0.0, 0), SamplerOptions(temperature=0.8, min_p=0.05)),
        (make_row(8, 49_152, 2.5, 0.0, 0), SamplerOptions(repeat_penalty=1.5)),
    ]
    for row, opts in cases:
        gathered.clear()
        history = [int(np.argmax(row))]  # the penalized argmax forces the general greedy path
        for u in (0.0, 0.3, 0.9999):
            assert pick_token(row, history, opts, u) == reference_pick(row, history, opts, u)
        assert gathered and max(gathered) < row.size // 20, (opts, gathered)


def test_cumsum_is_sequential_as_the_prefilter_proof_assumes() -> None:
    # 1 followed by a million half-ulp terms: sequential summation never moves off 1.0,
    # pairwise summation would accumulate them to about 1 + 1.1e-10.
    w = np.full(1_000_001, 2.0**-53)
    w[0] = 1.0
    assert np.cumsum(w)[-1] == 1.0


# --- inputs ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "opts",
    [
        SamplerOptions(),
        SamplerOptions(repeat_penalty=1.2),
        SAMPLED,
        SamplerOptions(temperature=1.0),
    ],
)
def test_read_only_engine_rows_are_never_written(opts: SamplerOptions) -> None:
    row = make_row(9, 8192, 2.5, 0.0, 0)
    before = row.copy()
    view = row[:]
    view.setflags(write=False)
    history = [int(np.argmax(row)), 3, 3]
    Sampler(opts).sample(view, history)
    assert np.array_equal(row, before)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_logits_are_rejected(temperature: float, bad: float) -> None:
    row = np.zeros(5000, dtype=np.float32)
    row[4321] = bad
    with pytest.raises(InvalidArgument):
        Sampler(SamplerOptions(temperature=temperature)).sample(row, [])
    with pytest.raises(InvalidArgument):
        Sampler(SamplerOptions(temperature=temperature)).sample(np.full(10, -np.inf), [])


def test_masked_tokens_are_never_sampled() -> None:
    row = np.full(100, -np.inf, dtype=np.float32)
    row[[17, 42]] = [0.0, 0.5]
    sampler = Sampler(SamplerOptions(temperature=5.0, seed=1))
    assert {sampler.sample(row, []) for _ in range(200)} == {17, 42}


def test_malformed_inputs_raise_named_errors() -> None:
    with pytest.raises(InvalidArgument):
        Sampler(SAMPLED).sample(np.zeros((2, 5), dtype=np.float32), [])
    with pytest.raises(InvalidArgument):
        argmax(np.zeros(0))
    with pytest.raises(InvalidToken):
        Sampler(SamplerOptions(repeat_penalty=1.1)).sample(np.zeros(10), [-1])
    for u in (None, 1.0, -0.1):
        with pytest.raises(InvalidArgument):
            pick_token(ROW4, [], SAMPLED, u)
    assert pick_token(ROW4, [], SamplerOptions(), None) == 0
    with pytest.raises(InvalidArgument):
        Sampler(object())  # type: ignore[arg-type]


# --- options -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", math.nan),
        ("temperature", math.inf),
        ("temperature", "0.8"),
        ("temperature", 1e-300),  # positive but so small that logits / T overflow float64
        ("top_k", -1),
        ("top_k", 2.0),
        ("top_k", True),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("top_p", math.nan),
        ("min_p", -0.1),
        ("min_p", 1.0),
        ("repeat_penalty", 0.0),
        ("repeat_penalty", -1.1),
        ("repeat_penalty", math.inf),
        ("frequency_penalty", math.nan),
        ("presence_penalty", -math.inf),
        ("penalty_last_n", -2),
        ("penalty_last_n", 1.5),
        ("seed", -1),
        ("seed", None),
    ],
)
def test_invalid_options_name_the_field(field: str, value: object) -> None:
    with pytest.raises(InvalidOption, match=field) as info:
        SamplerOptions(**{field: value})
    assert isinstance(info.value, FucinaError)


def test_option_properties_and_normalization() -> None:
    assert SamplerOptions().greedy and SamplerOptions(temperature=-0.5).greedy
    assert not SamplerOptions(temperature=1e-3).greedy
    assert not SamplerOptions(temperature=MIN_TEMPERATURE).greedy  # the bound itself samples
    assert not SamplerOptions().uses_penalties
    assert not SamplerOptions(repeat_penalty=1.3, penalty_last_n=0).uses_penalties
    for kw in ({"repeat_penalty": 0.9}, {"frequency_penalty": 0.1}, {"presence_penalty": -0.1}):
        assert SamplerOptions(**kw).uses_penalties
    opts = SamplerOptions(temperature=1, top_k=np.int64(5), seed=np.uint32(3))
    assert type(opts.temperature) is float and type(opts.top_k) is int and type(opts.seed) is int
    with pytest.raises(InvalidOption, match="seed"):
        Sampler(SamplerOptions()).reset(seed=-3)


# --- benchmark ---------------------------------------------------------------------------------


def test_benchmark_runs_and_reports_every_config(capsys) -> None:
    assert bench.main(["--calls", "2", "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert {(r["model"], r["config"]) for r in results} == {
        (m, c) for m in bench.VOCABS for c in bench.CONFIGS
    }
    assert all(r["median_us"] > 0 and r["p90_us"] >= r["median_us"] for r in results)
    assert bench.main(["--calls", "2"]) == 0
    assert "t0.8 k40 p0.95" in capsys.readouterr().out
