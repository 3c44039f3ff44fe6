"""Break points: the tokens this answer broke a copy right after; the draft token after one is priced apart."""

from __future__ import annotations

import random

from fucina.speculative.break_points import RATIO, BreakPoints
from fucina.speculative.costs import CostTable
from fucina.speculative.policy import (N_BUCKETS, PRIOR_AFTER_BREAK, DraftPolicy, PolicyOptions, e_bucket,
                                      e_label, token_bucket)

# A draft copying `if self .pos ...` where the answer renamed `self` (it writes ARG after it).
IF, SELF, POS, IX, COLON, ARG, NL, X, EQ, LINENO = 10, 11, 12, 13, 14, 300, 15, 16, 17, 18

#: Verifies cost one plain step and a tenth per drafted token: long drafts pay when they hold.
CHEAP = CostTable(tuple((n, 1 + 0.1 * (n - 1)) for n in range(2, 65)), "test: cheap verifies")


def test_the_worked_example():
    bp = BreakPoints()
    assert bp.flags(NL, [IF, SELF, POS]) is None  # nothing broke yet
    bp.scored(IF, True, SELF)  # the draft's SELF after IF held
    bp.scored(SELF, False, ARG)  # its POS after SELF did not: the answer wrote ARG
    assert bp.is_break_point(SELF) and not bp.is_break_point(IF)
    # The next draft's token after SELF is flagged; so is its first when SELF was just committed.
    assert bp.flags(EQ, [X, EQ, SELF, LINENO]) == [False, False, False, True]
    assert bp.flags(SELF, [LINENO, NL]) == [True, False]
    assert bp.flags(NL, [IF, X]) is None
    # A draft that already carries the edit (ARG after SELF: a rewrite rule wrote it) is not flagged.
    assert bp.flags(EQ, [X, EQ, SELF, ARG, LINENO]) is None


def test_a_token_that_copies_mostly_hold_through_is_no_break_point():
    bp = BreakPoints()
    bp.scored(NL, False, X)
    assert bp.is_break_point(NL)
    held = int(1 / RATIO)  # one break in more than 1 / RATIO trials: below the share
    for _ in range(held):
        bp.scored(NL, True, IF)
    assert not bp.is_break_point(NL)
    bp.scored(None, False, X)  # a token with nothing before it counts for no token
    assert bp.flags(None, [IF]) is None


def test_the_class_and_its_labels():
    assert len(PRIOR_AFTER_BREAK) == N_BUCKETS
    # After a break point whatever the source says of the token (forked, unique, piece, or nothing).
    for forks, pieces in (([True], None), ([False], [True]), (None, None)):
        assert token_bucket(9, 1, forks, pieces, [True]) == e_bucket(9) + 4 * N_BUCKETS
    assert token_bucket(2, 1, [False], None, [False]) == e_bucket(2) + N_BUCKETS
    assert e_label(8 + 4 * N_BUCKETS) == "m8-11 after-break"


def history(p: DraftPolicy) -> None:
    """Copies of a line that hold, and copies through SELF that break right after it (the rename)."""
    for _ in range(6):
        p.choose([X, EQ, NL, IF, X, EQ, NL, IF], 4, "ref0")
        p.observe([X, EQ, NL, IF, X, EQ, NL, IF])
        p.choose([IF, SELF, POS, IX], 4, "ref0")
        p.observe([IF, SELF, ARG])


def test_the_policy_learns_break_points_and_verifies_up_to_one():
    p = DraftPolicy(CHEAP, PolicyOptions(memory=10**6))
    history(p)
    assert p.break_points is not None and p.break_points.is_break_point(SELF)
    assert p.learned()["reference"]["m6 after-break"] == (0, 5)  # POS after SELF, from the second round on
    # The token after SELF is priced by what followed SELF: the verify stops at SELF, whose
    # correction comes free. Without break points the same token is priced with every m6 token
    # (half of which held), and the verify runs on through it.
    draft = [IF, SELF, POS, IX, COLON, NL, X, EQ, NL, IF]
    assert p.choose(draft, 4, "ref0") == 2
    off = DraftPolicy(CHEAP, PolicyOptions(memory=10**6, break_points=False))
    history(off)
    assert off.break_points is None and off.choose(draft, 4, "ref0") > 2


def test_flags_match_brute_force():
    rng = random.Random(3)
    for _ in range(200):
        bp, counts, instead = BreakPoints(), {}, {}
        for _ in range(rng.randrange(0, 30)):
            left, hit, written = rng.randrange(0, 6), rng.random() < 0.6, rng.randrange(0, 6)
            bp.scored(left, hit, written)
            c = counts.setdefault(left, [0, 0])
            c[0] += not hit
            c[1] += 1
            if not hit:
                instead.setdefault(left, set()).add(written)
        last, draft = rng.randrange(0, 6), [rng.randrange(0, 6) for _ in range(rng.randrange(1, 8))]
        want = []
        for left, token in zip([last, *draft[:-1]], draft):
            c = counts.get(left)
            want.append(c is not None and c[0] >= 1 and c[0] >= RATIO * c[1] and token not in instead.get(left, ()))
        assert bp.flags(last, draft) == (want if any(want) else None)
