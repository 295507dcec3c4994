from hypothesis import given
from hypothesis import strategies as st

from kvforensics.causes import Mechanism, PoolReading, classify


def test_incident_message_is_exhaustion():
    got = classify(2056, [PoolReading("full", available=0, free=0, evictable=0)])
    assert got.mechanism is Mechanism.EXHAUSTION
    assert (got.pool, got.free, got.evictable) == ("full", 0, 0)


def test_eviction_shortfall_when_cache_could_have_covered_it():
    got = classify(8192, [PoolReading("full", available=9000, free=1024, evictable=7976)])
    assert got.mechanism is Mechanism.EVICTION_SHORTFALL


def test_page_granularity_when_it_fits_in_tokens():
    got = classify(100, [PoolReading("full", available=120, free=120, evictable=0)])
    assert got.mechanism is Mechanism.PAGE_GRANULARITY


def test_hybrid_pool_binds_when_full_would_fit():
    pools = [PoolReading("full", available=3000, free=1000, evictable=2000),
             PoolReading("swa", available=700, free=200, evictable=500)]
    got = classify(2500, pools)
    assert (got.mechanism, got.pool) == (Mechanism.HYBRID_POOL, "swa")


def test_missing_numbers_are_unknown_not_guessed():
    assert classify(None, [PoolReading("full", available=5)]).mechanism is Mechanism.UNKNOWN
    assert classify(5, []).mechanism is Mechanism.UNKNOWN
    # only a total with unknown evictable: cannot tell free from evictable
    assert classify(5, [PoolReading("full", available=10)]).mechanism is Mechanism.UNKNOWN


@given(n=st.integers(1, 10**7), a=st.integers(0, 10**7), e=st.integers(0, 10**7))
def test_families_partition_the_full_pool(n, a, e):
    got = classify(n, [PoolReading("full", available=a + e, free=a, evictable=e)])
    expected = (Mechanism.EXHAUSTION if n > a + e
                else Mechanism.EVICTION_SHORTFALL if n > a else Mechanism.PAGE_GRANULARITY)
    assert got.mechanism is expected


def test_hybrid_pool_with_full_pool_fitting_free():
    pools = [PoolReading("full", available=5000, free=5000, evictable=0),
             PoolReading("mamba", available=3, free=3, evictable=0)]
    got = classify(32, pools)
    assert (got.mechanism, got.pool) == (Mechanism.HYBRID_POOL, "mamba")
