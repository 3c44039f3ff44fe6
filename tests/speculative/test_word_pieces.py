"""Word pieces: a unique draft token that continues a word is priced apart from a word start.

``WordPieces`` reads the flags off the model's token bytes; the policy learns and prices the
``piece`` class; the decoder hands the model's pieces to its policy and stays lossless.
"""

from __future__ import annotations

from fucina.speculative.costs import CostTable
from fucina.speculative.policy import (N_BUCKETS, N_CLASSES, PRIOR_PIECE, PRIOR_UNIQUE, DraftPolicy, PolicyOptions,
                                       WordPieces, e_label, token_bucket)
from tests.speculative.test_forks import forking_run

FLAT = CostTable(tuple((n, 1 + 0.03 * (n - 1)) for n in range(2, 34)), "flat")
PIECES = {5: b" extra", 6: b"ordinary", 7: b".", 8: b"", 9: b"\n", 10: b"42", 11: b"\xc3\xa9t\xc3\xa9"}


def test_worked_example_and_memo():
    calls: list[int] = []

    def token_bytes(t: int) -> bytes:
        calls.append(t)
        return PIECES[t]

    wp = WordPieces(token_bytes)
    assert wp([5, 6, 7]) == [False, True, False]
    # An empty piece (a control token), a newline and a non-ASCII first byte start no word piece;
    # a digit continues a number.
    assert wp([8, 9, 10, 11]) == [False, False, True, False]
    assert wp([6, 6, 5]) == [True, True, False]
    assert sorted(calls) == sorted(set(calls)), "each token's bytes are read once"


def test_buckets_and_labels():
    assert len(PRIOR_PIECE) == N_BUCKETS and N_CLASSES == 4
    # A unique piece gets its own class; a forked token stays forked; no forks, no classes.
    assert token_bucket(2, 1, [False], [True]) == 2 + 3 * N_BUCKETS
    assert token_bucket(2, 1, [False], [False]) == 2 + N_BUCKETS
    assert token_bucket(2, 1, [True], [True]) == 2 + 2 * N_BUCKETS
    assert token_bucket(2, 1, None, [True]) == 2
    assert e_label(3 + 3 * N_BUCKETS) == "m3 piece" and e_label(8 + 3 * N_BUCKETS) == "m8-11 piece"


def test_the_policy_learns_pieces_apart():
    wp = WordPieces(PIECES.__getitem__)
    p = DraftPolicy(FLAT, PolicyOptions(memory=10**6), pieces=wp)
    p.choose([5, 6, 7], 1, "conversation", forks=[False, False, True])
    p.observe([5, 6, 9])  # token 7 missed
    assert p.learned() == {"conversation": {"m1 unique": (1, 1), "m2 piece": (1, 1), "m3 forked": (0, 1)}}
    off = DraftPolicy(FLAT, PolicyOptions(memory=10**6, word_pieces=False), pieces=wp)
    assert off.pieces is None
    off.choose([5, 6, 7], 1, "conversation", forks=[False, False, True])
    off.observe([5, 6, 9])
    assert off.learned() == {"conversation": {"m1 unique": (1, 1), "m2 unique": (1, 1), "m3 forked": (0, 1)}}


def test_pieces_are_priced_above_word_starts_at_short_matches():
    # The priors say so (m1..m8) and so does the policy's value of the same draft.
    assert all(pc > u for pc, u in zip(PRIOR_PIECE[1:8], PRIOR_UNIQUE[1:8]))
    wp = WordPieces(lambda t: b"word" if t < 50 else b" word")
    p = DraftPolicy(CostTable(((2, 1.3), (3, 1.5), (4, 1.7), (5, 1.9)), "cpu-like"), pieces=wp)
    pieces = p.best_length(4, 1, "conversation", [False] * 4, wp([1, 2, 3, 4]))
    starts = p.best_length(4, 1, "conversation", [False] * 4, wp([60, 61, 62, 63]))
    assert pieces[1] > starts[1]


def test_the_decoder_gives_its_policy_the_models_pieces_and_stays_lossless():
    d, prompt, expected = forking_run()
    assert isinstance(d.policy.pieces, WordPieces)
    d.feed(prompt)
    assert list(d.generate(40)) == expected
    assert any(lab.endswith(" piece") for lab in d.policy.learned()["conversation"])
    assert d.stats.verifies > 0
