"""The message-arithmetic causes on out-of-memory records as the rebuild gives them."""

from kvforensics.causes.pools import FAMILIES, pool_causes
from kvforensics.rounds.records import LoggedOom


def _held(oom):
    return {c.id: c.held for c in pool_causes(oom)}


def test_hybrid_pool_holds_when_the_swa_line_is_short_and_the_full_pool_would_fit():
    oom = LoggedOom(2500, 3000, available_size=1000, evictable_size=2000, swa_available=700,
                    round=4, where="pp0.log:9")
    assert _held(oom) == {"page_granularity": False, "eviction_shortfall": False,
                          "hybrid_pool": True}
    hybrid = next(c for c in pool_causes(oom) if c.id == "hybrid_pool")
    assert hybrid.figures.pool == "swa" and hybrid.round == 4 and hybrid.story


def test_missing_numbers_are_cannot_tell_not_a_guess():
    assert set(_held(LoggedOom(None, 5)).values()) == {None}


def test_no_out_of_memory_rules_every_family_out():
    assert _held(None) == dict.fromkeys(FAMILIES, False)
