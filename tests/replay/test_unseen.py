"""The least take outside the adder, where the logs could not show one, that undoes a
policy's "no out of memory"."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kvforensics.model import RoundRecord
from kvforensics.replay.unseen import UnseenTake, blind_rounds, least_take

PAGE = 16


def _rec(n: int, end: int) -> RoundRecord:
    return RoundRecord(n, float(n), [], [], False, end, end, 0, 0)


def test_blind_rounds_are_those_after_a_round_that_left_less_than_a_page():
    recs = [_rec(10, 400), _rec(11, 0), _rec(12, 15), _rec(13, 16), _rec(14, 0)]
    # a take before 12 follows round 11 (0 free), before 13 follows 12 (15: under a page)
    assert blind_rounds(recs, 10, 15, PAGE) == (12, 13, 15)
    # only rounds after the start and up to the last one asked for
    assert blind_rounds(recs, 12, 14, PAGE) == (13,)
    assert blind_rounds(recs, 10, 11, PAGE) == ()


def test_no_blind_round_no_answer():
    assert least_take(lambda r, x: True, (), pool=1024, page=PAGE) is None


def test_a_policy_no_take_undoes():
    u = least_take(lambda r, x: False, (5, 9), pool=1024, page=PAGE)
    assert u == UnseenTake((5, 9), 9, None)
    assert "undoes it" in u.sentence() and "slots or more" not in u.sentence()


@given(
    pool_pages=st.integers(1, 5000),
    levels=st.lists(st.integers(1, 6000), min_size=3, max_size=3),
    rounds=st.lists(st.integers(2, 100), min_size=1, max_size=6, unique=True),
    first=st.integers(1, 101),
    either_side=st.booleans(),
)
def test_the_least_take_is_the_threshold_in_whole_pages(pool_pages, levels, rounds, first, either_side):
    """For a policy that runs out once a take reaches a threshold (one per round), the
    answer is the least threshold over the earliest and latest blind round (and, given
    the first round a take may precede, the rounds either side of them from it on),
    rounded up to a page; none where no threshold is within the pool."""
    blind = tuple(sorted(rounds))
    pool = pool_pages * PAGE
    def thr(r: int) -> int:
        return levels[r % 3] * PAGE - 3 - r % 5

    near = (-1, 0, 1) if either_side else (0,)
    tried = {b + d for b in {blind[0], blind[-1]} for d in near if not either_side or b + d >= first}
    calls: list[tuple[int, int]] = []

    def runs_out(r: int, x: int) -> bool:
        assert x % PAGE == 0 and 0 < x <= pool and r in tried
        calls.append((r, x))
        return x >= thr(r)

    u = least_take(runs_out, blind, pool=pool, page=PAGE, first=first if either_side else None)
    assert u is not None and u.blind == blind
    reach = {r: -(-thr(r) // PAGE) * PAGE for r in tried if -(-thr(r) // PAGE) * PAGE <= pool}
    if not reach:
        assert u.least_slots is None
    else:
        assert u.least_slots == min(reach.values())
        assert reach[u.before_round] == u.least_slots
        assert u.at in blind and abs(u.at - u.before_round) <= (1 if either_side else 0)
    # bounded work: a binary search per round searched
    assert len(calls) <= len(tried) * (pool_pages.bit_length() + 2)


def test_a_take_a_round_apart_is_named_with_the_round_it_stands_for():
    u = UnseenTake((12,), 11, 4096, 12)
    assert "before round 11 under it (about the time of round 12 as the code ran)" in u.sentence()
    assert u.as_dict()["as_ran_round"] == 12
