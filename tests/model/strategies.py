"""Hypothesis strategies for prefill-node scenarios (page-aligned pools)."""

from hypothesis import strategies as st

from kvforensics.scenario import parse_scenario


@st.composite
def scenarios(draw, *, max_requests: int = 6):
    """A page-aligned node: free and evictable whole pages, page-aligned device prefixes,
    chunk budget a whole number of pages, KV transfers that only release memory."""
    page = draw(st.sampled_from([1, 16, 64]))
    align = draw(st.sampled_from([0, 4 * page, 256 if 256 % page == 0 else 4 * page]))
    chunk = page * draw(st.integers(4, 64))
    pool_pages = draw(st.integers(16, 512))
    free_pages = draw(st.integers(0, pool_pages))
    evict_pages = draw(st.integers(0, pool_pages - free_pages))
    n = draw(st.integers(1, max_requests))
    waiting = []
    carved = 0
    for i in range(n):
        seq = draw(st.integers(1, pool_pages * page))
        dp_pages = draw(st.integers(0, max(0, (seq - 1) // page)))
        dp = dp_pages * page
        if carved + dp > evict_pages * page:
            dp = 0
        carved += dp
        hh = draw(st.integers(0, max(0, seq - 1 - dp)))
        waiting.append(
            {
                "rid": f"r{i}",
                "seq_len": seq,
                "prefix_len": dp,
                "host_hit_len": hh,
                "arrival": float(draw(st.integers(0, 5))),
            }
        )
    data = {
        "config": {
            "page_size": page,
            "align_size": align,
            "chunked_prefill_size": chunk,
            "max_prefill_tokens": chunk * draw(st.integers(1, 3)),
            "pool_size": pool_pages * page,
        },
        "pool": {"free": free_pages * page, "evictable": evict_pages * page},
        "timing": {"round_overhead_s": 1.0, "transfer_latency_s": float(draw(st.integers(0, 6)))},
        "arrivals": waiting,
    }
    return data


def build(data, policy):
    return parse_scenario(data, name="hypothesis").build_node(policy)
