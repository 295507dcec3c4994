"""The ``sglang-0.5.23`` profile: each of its differences from ``fork``, one test each.

The profile is held to SGLang's own adder by tests/conformance/test_differential.py; these
tests pin the same rules without SGLang, and pin that ``fork`` is unchanged.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvforensics.model.adder import PrefillAdder
from kvforensics.model.config import Config
from kvforensics.model.node import PrefillNode
from kvforensics.model.policies import get_policy
from kvforensics.model.pool import PagePool
from kvforensics.model.profiles import (
    FORK,
    PROFILES,
    SGLANG_0_5_11,
    SGLANG_0_5_12,
    SGLANG_0_5_13,
    SGLANG_0_5_23,
    Profile,
    get_profile,
    profile_for_release,
)
from kvforensics.model.request import Request

UPSTREAM = get_policy("upstream")


def cfg(**kw) -> Config:
    base = dict(page_size=64, chunked_prefill_size=4096, max_prefill_tokens=16384, pool_size=10**6)
    base.update(kw)
    return Config(**base)


def node(profile: Profile, *, free: int, waiting=(), chunked=None, **kw) -> PrefillNode:
    c = cfg(**kw)
    pool = PagePool(page_size=c.page_size, size=c.pool_size, free=free)
    return PrefillNode(c, UPSTREAM, pool, waiting=list(waiting), chunked=chunked, profile=profile)


def test_registry_and_fork_defaults():
    assert get_profile("sglang-0.5.23") is SGLANG_0_5_23 and set(PROFILES) == {
        "fork", "sglang-0.5.9", "sglang-0.5.10", "sglang-0.5.11", "sglang-0.5.12",
        "sglang-0.5.13", "sglang-0.5.23",
    }  # fmt: skip
    assert Profile("fork") == FORK
    assert FORK.skip_waiting_on == {"NO_TOKEN", "OTHER"} and FORK.one_chunked_guard
    assert not (FORK.max_new_clip or FORK.load_back_may_fail or FORK.whole_page_free)
    assert FORK.truncated_end_page_floor and not FORK.input_check_before_lock
    with pytest.raises(ValueError):
        get_profile("sglang-0.5.22")


@pytest.mark.parametrize(
    "version, name",
    [("0.5.9", "sglang-0.5.9"), ("0.5.10.post1", "sglang-0.5.10"), ("0.5.13", "sglang-0.5.13"),
     ("0.5.16", "sglang-0.5.13"), ("0.5.22", "sglang-0.5.13"), ("0.5.23", "sglang-0.5.23")],
)  # fmt: skip
def test_release_to_profile(version, name):
    assert profile_for_release(version).name == name


def test_releases_before_and_after_the_profiles_have_none():
    assert profile_for_release("0.5.8") is None and profile_for_release("0.5.24") is None
    assert profile_for_release("0.4.10") is None


def test_release_ranges_do_not_overlap():
    for v in [f"0.5.{i}" for i in range(9, 24)]:
        assert sum(p.covers(v) for p in PROFILES.values()) == 1, v


def test_before_0_5_12_a_truncated_piece_ends_where_the_chunk_budget_does():
    # Prefix 100 (device 64 + a host hit of 36) at page 64, chunk budget 200: the piece is
    # floor_page(200) = 192 long. 0.5.12 floors its end, 292, to 256.
    req = lambda: Request("A", 4000, device_prefix=64, host_hit=36)  # noqa: E731
    ends = {}
    for p in (SGLANG_0_5_11, SGLANG_0_5_12):
        n = node(p, free=100000, waiting=[req()], chunked_prefill_size=200)
        rec = n.step()
        ends[p.name] = rec.pieces[0]
    assert ends == {"sglang-0.5.11": ("A", 100, 292), "sglang-0.5.12": ("A", 100, 256)}


def test_before_0_5_13_the_input_check_refuses_ahead_of_the_locked_memory_check():
    # A takes 1088 + 64 of memory and 1088 of the 1100 input tokens. B's device prefix of
    # 640 is evictable: unlocked, B's need (1000 + 1 = 1001) fits the 2000 + 640 - 1153;
    # locked, it does not. Its extend (448 paged) reaches the 12 input tokens left.
    def run(profile):
        c = cfg(max_prefill_tokens=1100)
        pool = PagePool(page_size=64, size=10**6, free=2000, evictable={"pfx": 640})
        waiting = [Request("A", 1088), Request("B", 1640, device_prefix=640, prefix_keys=("pfx",))]
        n = PrefillNode(c, UPSTREAM, pool, waiting=waiting, profile=profile)
        return [(d[1], d[2], d[3]) for d in n.step().decisions]

    assert run(SGLANG_0_5_12)[1] == ("B", "rejected", "OTHER")
    assert run(replace(SGLANG_0_5_12, input_check_before_lock=False))[1] == (
        "B", "rejected", "NO_TOKEN",
    )  # fmt: skip
    assert run(SGLANG_0_5_13)[1] == ("B", "rejected", "NO_TOKEN")


def test_resumed_chunk_leaving_no_memory_still_offers_one_request():
    # 1024 free: the resumed piece is 1024, its page takes memory below 0: NO_TOKEN.
    def run(profile):
        n = node(
            profile,
            free=1024,
            waiting=[Request("A", 1088)],
            chunked=Request("B", 8000, done=3008, admitted_round=-1),
        )
        return n.step()

    fork, sg = run(FORK), run(SGLANG_0_5_23)
    assert fork.skipped_waiting and [d[:2] for d in fork.decisions] == [("add_chunked_req", "B")]
    assert not sg.skipped_waiting
    assert [(d[1], d[2], d[3]) for d in sg.decisions] == [
        ("B", "resumed", "NO_TOKEN"),
        ("A", "rejected", "NO_TOKEN"),
    ]


def test_no_one_chunked_guard_under_fcfs():
    # truncation_align_size 100 at page 64: X's piece 4096 -> 4000 -> end 3968, 128 left;
    # Y is truncated to one page in the same batch (fork: OTHER).
    def run(profile):
        n = node(
            profile,
            free=100_000,
            truncation_align_size=100,
            waiting=[Request("X", 9000), Request("Y", 9000)],
        )
        return n.step()

    assert run(FORK).pieces == [("X", 0, 3968)]
    assert run(SGLANG_0_5_23).pieces == [("X", 0, 3968), ("Y", 0, 64)]


def test_max_new_clipped_in_check_and_charge():
    c = cfg(max_new_tokens=10_000, page_size=1)
    for profile, promised in ((FORK, 10_000), (SGLANG_0_5_23, 4096)):
        pool = PagePool(page_size=1, size=10**6, free=20_000)
        adder = PrefillAdder(c, UPSTREAM, pool, profile=profile)
        adder.add_one_req(Request("A", 1000))
        assert adder.budget.total_offset == 1000 + 1 + promised
        assert adder.budget.cur_offset == 1000 + 1


class RefusingLoadBack(PagePool):
    """A pool whose host load-back cannot get its pages (HiCache's ``load_back`` fails)."""

    __slots__ = ()

    def can_allocate(self, tokens: int) -> bool:
        return False


def test_failed_load_back_reselects_without_host_hit():
    c = cfg(chunked_prefill_size=1024)
    req = Request("C", 6128, device_prefix=0, host_hit=6000)
    pool = RefusingLoadBack(page_size=64, size=10**6, free=20_000)
    adder = PrefillAdder(c, UPSTREAM, pool, profile=SGLANG_0_5_23)
    adder.add_one_req(req)
    # 128 to compute with the host hit; without it the whole 6128 is recomputed, so the
    # piece is truncated at the chunk budget, from 0, and nothing was loaded.
    assert [(r.rid, s, e) for r, s, e in adder.pieces] == [("C", 0, 1024)]
    assert pool.free == 20_000 and adder.new_chunked is req
    # The fork loads whatever happens (can_allocate is not asked).
    pool = RefusingLoadBack(page_size=64, size=10**6, free=20_000)
    fork = PrefillAdder(c, UPSTREAM, pool, profile=FORK)
    fork.add_one_req(Request("C", 6128, device_prefix=0, host_hit=6000))
    assert [(s, e) for _, s, e in fork.pieces] == [(6000, 6128)]


def test_free_is_whole_pages():
    # The postmortem's 12000 free at page 64: the allocator holds 187 pages = 11968.
    assert node(SGLANG_0_5_23, free=12_000).pool.baseline() == 11_968
    assert node(FORK, free=12_000).pool.baseline() == 12_000
