"""Whatever the sizes and the traffic, the scan finds exactly the gap admissions of the run
that wrote the logs, and a node's margin is what its rounds left minus unreserved tails."""

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kvforensics.replay.whole_log import lowest_per_stretch
from kvforensics.scan import Margin, NodeSpec, ScanOptions, scan_node
from kvforensics.synth.agent import agent_capture, write_agent_node
from tests.scan.test_fleet import found, truth_gaps

SIZES = st.sampled_from([16, 32, 64]).flatmap(
    lambda page: st.fixed_dictionaries(
        {
            "page_size": st.just(page),
            "align_size": st.sampled_from([0, 2 * page, 4 * page, 8 * page]),
            "chunked_prefill_size": st.sampled_from([4096, 8192, 16384]).map(
                lambda c: c // page * page
            ),
        }
    )
)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), sizes=SIZES)
# draws that found silent rounds where memory came back (tests/replay/test_memory_back.py)
@example(seed=239, sizes={"page_size": 64, "align_size": 128, "chunked_prefill_size": 4096})
@example(seed=205, sizes={"page_size": 64, "align_size": 512, "chunked_prefill_size": 4096})
def test_scan_finds_every_gap_admission_of_the_run(seed, sizes):
    sizes["max_prefill_tokens"] = sizes["chunked_prefill_size"]
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_agent_node(Path(tmp), seed=seed, requests=120, **sizes)
        n = scan_node(NodeSpec(tmp, tuple(map(str, paths))), ScanOptions())
    assert n.error is None, n.error
    assert n.mismatches == 0 and n.contradictions == 0
    got = found(n.whole_log.gap_admissions)
    assert got == truth_gaps(agent_capture(seed, 120, **sizes))
    if not sizes["align_size"]:
        assert got == []  # without alignment a truncation spends the whole chunk budget
    for m in n.whole_log.margins:
        assert m.margin == m.left - m.unreserved_tails
    tight = n.whole_log.tightest()
    assert all(tight.margin <= m.margin for m in n.whole_log.margins)


@given(
    values=st.lists(st.integers(-(10**6), 10**6), min_size=1, max_size=2000),
    points=st.integers(1, 300),
)
def test_margins_kept_are_few_in_order_and_hold_the_tightest(values, points):
    margins = [Margin(i, None, v, 0, v) for i, v in enumerate(values)]
    kept = lowest_per_stretch(margins, points)
    assert len(kept) <= points
    assert [m.round for m in kept] == sorted(m.round for m in kept)
    tight = min(margins, key=lambda m: (m.margin, m.round))
    assert tight in kept
    assert set(kept) <= set(margins)
