"""Property: memory taken outside the adder between rounds is found from the rendered
logs alone, each fall with its size (within a page), and no fall is found that did not
happen."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvforensics.logs import read_events
from kvforensics.model import Config, PagePool, PrefillNode, Request, Timing, get_policy
from kvforensics.rounds import cross_check, read_config, rebuild_rounds
from kvforensics.rounds.continuity import unexplained_drops
from kvforensics.synth import Clock, capture_run, pp0_lines, pp3_lines, startup_lines, write_log


@st.composite
def nodes(draw):
    """A node with plenty of memory, transfers that never end during the run, requests
    arriving over time, and a few outside allocations at random rounds."""
    page = draw(st.sampled_from([16, 64]))
    align = draw(st.sampled_from([0, 256]))
    chunk = page * draw(st.integers(8, 64))
    cfg = Config(
        page_size=page,
        chunked_prefill_size=chunk,
        max_prefill_tokens=2 * chunk,
        pool_size=1 << 22,
        align_size=align,
    )
    reqs = []
    for i in range(draw(st.integers(4, 16))):
        seq = draw(st.integers(2, 6 * chunk))
        host = draw(st.integers(0, seq - 1)) if draw(st.booleans()) else 0
        reqs.append(
            Request(f"r{i:02d}", seq, host_hit=host, arrival=float(draw(st.integers(0, 20))))
        )
    outside = draw(
        st.dictionaries(
            st.integers(1, 15), st.integers(1, 4000).map(lambda n: n * page), min_size=1, max_size=5
        )
    )
    return cfg, reqs, outside


def _run(cfg, reqs, outside, tmp):
    pool = PagePool(page_size=cfg.page_size, size=cfg.pool_size, free=cfg.pool_size // 2)
    timing = Timing(round_overhead_s=1.0, transfer_latency_s=1e6)
    node = PrefillNode(
        cfg, get_policy("prefix"), pool, arrivals=reqs, timing=timing, outside=outside
    )
    cap = capture_run(node, max_rounds=60)
    clock = Clock.at("2026-11-02 12:00:00")
    paths = [tmp / "pp0.log", tmp / "pp3.log"]
    write_log(paths[0], [*startup_lines(cfg, "PP0"), *pp0_lines(cap, clock)])
    write_log(paths[1], pp3_lines(cap, clock))
    taken = {int(k.split("@")[1]): n for k, n in pool.held.items() if k.startswith("outside@")}
    return cap, paths, taken


def _expected(cap, taken: dict[int, int]) -> dict[int, int]:
    """Falls as the logs can show them: each summed up to the next round that prints a
    check line (its observed baseline); a fall with no such round after it leaves no trace."""
    observed = [rc.round for rc in cap.rounds if any(s.call == "add_one_req" for s in rc.steps)]
    out: dict[int, int] = {}
    for r, n in taken.items():
        nxt = next((o for o in observed if o >= r), None)
        if nxt is not None:
            out[nxt] = out.get(nxt, 0) + n
    return out


@pytest.mark.slow  # 60 nodes rendered to logs and replayed
@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(nodes())
def test_each_outside_allocation_is_found_and_nothing_else(tmp_path_factory, case):
    cfg, reqs, outside = case
    cap, paths, taken = _run(cfg, reqs, outside, tmp_path_factory.mktemp("drops"))
    if not any(rc.steps for rc in cap.rounds):
        return
    events, _ = read_events(paths)
    c, conf = read_config(events, {})
    rb = rebuild_rounds(events, c, conf)
    cross_check(rb, events)
    truth = [(r, s, e) for rc in cap.rounds for (r, s, e) in rc.pieces]
    rebuilt = [(p.rid, p.start, p.end) for rnd in rb.rounds for p in rnd.pieces]
    assert rebuilt == truth, "the rebuild must hold the pieces as they ran"
    found = {d.before_round: d for d in unexplained_drops(rb)}
    want = _expected(cap, taken)
    assert set(found) == set(want), (found, want)
    for r, n in want.items():
        assert abs(found[r].tokens - n) < cfg.page_size, (r, found[r], n)
