"""The inverse sizing rule (which baselines give a resumed piece ending in a window)
against the forward rule, baseline by baseline."""

from hypothesis import given, settings
from hypothesis import strategies as st

from kvforensics.model import sizing


@settings(max_examples=200, deadline=None)
@given(
    start=st.integers(0, 300), left=st.integers(1, 300), chunk=st.integers(1, 200),
    align=st.sampled_from([0, 1, 16, 32]), lo=st.integers(0, 600), width=st.integers(0, 80),
    above=st.integers(-50, 150), pool=st.integers(1, 400),
)  # fmt: skip
def test_the_inverse_is_exactly_the_baselines_the_forward_rule_sends_into_the_window(
    start: int, left: int, chunk: int, align: int, lo: int, width: int, above: int, pool: int
) -> None:
    seq, hi = start + left, lo + width
    fits = [
        b for b in range(max(above + 1, 1), pool + 1)
        if lo <= sizing.resumed_piece(start, seq, chunk, b, align).end <= hi
    ]  # fmt: skip
    got = sizing.resumed_baselines_for(start, seq, chunk, align, (lo, hi), above, pool)
    if not fits:
        assert got is None
    else:
        # the end never falls as the baseline grows: the baselines form one range
        assert got == (fits[0], fits[-1]) and len(fits) == fits[-1] - fits[0] + 1
