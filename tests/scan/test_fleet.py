"""Acceptance: a synthesized fleet (the incident, healthy agent traffic with gaps, healthy
conversation traffic) scanned as a whole."""

import polars as pl
import pytest

from kvforensics.causes.gaps import through_gaps, unreserved
from kvforensics.scan import ScanOptions, scan, write_parquet
from kvforensics.synth.agent import agent_capture
from kvforensics.synth.incidents import external_allocation
from tests.conftest import FIXTURES

B, C = "as-1keim4u1e8", "as-xpkq7d03n5"


@pytest.fixture(scope="module")
def fleet(fleet_dir):
    return scan([str(fleet_dir)], ScanOptions(), jobs=1)


def node(fleet, name):
    return next(n for n in fleet.nodes if n.node.endswith(name))


def truth_gaps(cap) -> list[tuple]:
    """Admissions through a gap in the generating run's own ledger (the one the logs were
    rendered from), found by ``causes.gaps``: the scan must find the same ones in the
    ledger it re-runs from the logs."""
    return [
        (rc.round, v.rid, unreserved(v), a.rid, a.end - a.start, a.load_back)
        for rc in cap.rounds
        for v, a in through_gaps(rc.steps)
    ]


def found(gaps) -> list[tuple]:
    """The scan's gap admissions in the form of ``truth_gaps``."""
    return [
        (
            g.round,
            g.victim_rid,
            g.unreserved_tail,
            g.intruder_rid,
            g.intruder_compute,
            g.intruder_load_back,
        )
        for g in gaps
    ]


def test_one_node_per_directory(fleet, fleet_dir):
    assert [n.node for n in fleet.nodes] == [
        str(fleet_dir / d) for d in ("agent", "clean", "external", "incident")
    ]
    assert len(node(fleet, "incident").files) == 3
    assert all(n.error is None for n in fleet.nodes)


def test_every_gap_admission_of_the_agent_node_is_found(fleet):
    got = found(node(fleet, "agent").whole_log.gap_admissions)
    want = truth_gaps(agent_capture())
    assert len(want) > 10
    assert got == want
    assert all(load > 0 for *_, load in got)  # host-cached contexts loaded back
    assert node(fleet, "agent").ooms == ()


def test_the_incident_node_lists_its_oom_and_cause(fleet):
    inc = node(fleet, "incident")
    (oom,) = inc.ooms
    assert (oom.rid, oom.tokens, oom.available, oom.reproduced) == (B, 2056, 0, True)
    assert "unreserved_tail" in [c.id for c in oom.causes]
    (gap,) = inc.whole_log.gap_admissions
    assert (gap.victim_rid, gap.intruder_rid, gap.intruder_load_back) == (B, C, 15360)
    assert (gap.unreserved_tail, gap.intruder_compute, gap.leftover_chunk_budget) == (
        4936,
        185,
        192,
    )
    tight = inc.whole_log.tightest()
    # what round R left (2880) minus the tail no one reserved (4936): the 2056 the
    # out-of-memory asked for with nothing available
    assert (tight.round, tight.left, tight.unreserved_tails, tight.margin) == (0, 2880, 4936, -2056)
    (refused,) = inc.whole_log.refused["fixed"]
    assert (refused.rid, refused.round, refused.delay_s) == (C, 0, 4.0)


def test_an_oom_of_another_cause_lists_its_causes_and_no_gap(fleet):
    inc = external_allocation()
    want = inc.run().oom
    ext = node(fleet, "external")
    (oom,) = ext.ooms
    assert (oom.round, oom.rid, oom.tokens, oom.available, oom.reproduced) == (
        want.round,
        inc.victim,
        want.tokens,
        want.available,
        True,
    )
    assert {c.id for c in oom.causes} == set(inc.holds)
    assert ext.whole_log.gap_admissions == ()
    assert ext.whole_log.tightest().margin < 0


def test_a_node_without_gaps_lists_none(fleet):
    clean = node(fleet, "clean")
    assert clean.whole_log.gap_admissions == ()
    assert clean.ooms == ()
    assert clean.whole_log.tightest().margin > 0
    assert clean.as_dict()["gap_admissions"] == []


def test_totals_and_json_shape(fleet):
    d = fleet.as_dict()
    assert set(d) == {"nodes", "totals", "unreadable"}
    t = d["totals"]
    agent = len(node(fleet, "agent").whole_log.gap_admissions)
    assert t["gap_admissions"] == agent + 1
    assert (t["nodes"], t["nodes_with_oom"], t["nodes_with_gap_admissions"]) == (4, 2, 2)
    assert t["refused"]["fixed"] == 1
    first = d["nodes"][0]
    for key in (
        "node",
        "files",
        "ooms",
        "gap_admissions",
        "tightest_margin",
        "refused",
        "fidelity",
        "contradictions",
    ):
        assert key in first


def test_parquet_tables(fleet, tmp_path):
    out = tmp_path / "fleet.parquet"
    nodes_path, gaps_path = write_parquet(fleet, out, [])
    assert pl.read_parquet(nodes_path).equals(fleet.nodes_frame())
    gaps = pl.read_parquet(gaps_path)
    assert gaps.equals(fleet.gaps_frame())
    assert gaps.height == sum(len(n.whole_log.gap_admissions) for n in fleet.nodes)
    assert set(gaps["node"]) == {node(fleet, "agent").node, node(fleet, "incident").node}
    assert not list(tmp_path.glob(".*"))  # no temporary file left behind


def test_a_release_log_lists_its_oom_arithmetic_and_no_whole_log(tmp_path):
    import tomllib

    stock = FIXTURES / "logs" / "stock"
    with_oom = sorted(
        p for p in stock.glob("*.toml") if "oom" in tomllib.loads(p.read_text()).get("expect", {})
    )
    fleet = scan(
        [str(p.with_suffix(".log")) for p in with_oom], ScanOptions(), group_by="file", jobs=1
    )
    assert len(fleet.nodes) == len(with_oom) > 3
    for n, spec in zip(fleet.nodes, with_oom, strict=True):
        want = tomllib.loads(spec.read_text())["expect"]["oom"]
        assert n.error is None
        assert [(o.tokens, o.available) for o in n.ooms] == [
            (w["tokens"], w["available"]) for w in want
        ]
        assert [o.causes[0].id for o in n.ooms] == [w["mechanism"] for w in want]
        assert n.whole_log is None and n.as_dict()["gap_admissions"] == []
    assert fleet.nodes_frame()["gap_admissions"].null_count() == len(with_oom)
