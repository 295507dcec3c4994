"""Shortened values keep every number whole and say that they were cut."""

import re

from hypothesis import given
from hypothesis import strategies as st

from kvforensics.clip import LONGEST_NUMBER, clip
from kvforensics.report.terminal import shorten_words

_word = st.one_of(
    st.integers(0, 10**12).map(str),
    st.floats(0, 1e6, allow_nan=False).map(lambda f: f"{f:.2f}"),
    st.text("abcxyz=_[],", min_size=1, max_size=12),
    st.tuples(st.text("abc", min_size=1, max_size=4), st.integers(0, 10**9)).map(
        lambda t: f"{t[0]}={t[1]}"
    ),
)


def _ends_outside_a_number(kept: str, full: str) -> bool:
    nxt = full[len(kept) : len(kept) + 1]
    return not (kept[-1:] in set("0123456789.:-") and nxt in set("0123456789.:-") and nxt)


@given(st.lists(_word, min_size=1, max_size=30), st.sampled_from(["", " ", ","]), st.integers(5, 200))
def test_clip_never_cuts_a_number(words, sep, limit):
    text = sep.join(words)
    got = clip(text, limit)
    if got == text:
        return
    if got.endswith(" …"):
        kept = got[:-2]
    elif "…(cut inside a number of " in got:
        # only a number too long to show is cut, and the mark gives its length
        kept, mark = got.split("…(cut inside a number of ", 1)
        n = int(mark.split(" ", 1)[0])
        assert n > max(limit, LONGEST_NUMBER) and len(kept) == limit
        assert set(text[:n]) <= set("0123456789.:-")
        assert mark.endswith(f"; {len(text) - limit} more characters)")
        return
    else:
        kept, mark = got.split("…(", 1)
        assert mark == f"{len(text) - len(kept)} more characters)"
    assert text.startswith(kept) and len(kept) <= max(limit, len(text))
    assert _ends_outside_a_number(kept, text), (kept, text)


@given(st.lists(st.integers(0, 10**9), min_size=15, max_size=40))
def test_long_words_keep_their_numbers(nums):
    word = "blocks=[" + ",".join(map(str, nums)) + "]"
    got = shorten_words(word)
    if got == word:
        return
    head, tail = re.fullmatch(r"(.*)…\(\d+ more\)…(.*)", got).groups()
    # the head and tail are the word's, each cut between numbers
    assert word.startswith(head) and word.endswith(tail)
    assert not (head[-1].isdigit() and word[len(head)].isdigit())
    assert not (tail[0].isdigit() and word[-len(tail) - 1].isdigit())


def test_a_huge_number_is_cut_and_says_so():
    text = "9" * 65536
    got = clip(text, 160)
    mark = f"…(cut inside a number of 65536 characters; {65536 - 160} more characters)"
    assert got == "9" * 160 + mark
    assert clip("2" * 50, 12) == "2" * 50  # a number of a readable length: whole
    assert clip("avail mem=" + "2" * 40, 12) == "avail mem=…(40 more characters)"
