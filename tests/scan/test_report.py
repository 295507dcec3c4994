"""`scan --report DIR`: the markdown summary and its figures."""

import pytest
from PIL import Image

from kvforensics.scan import ScanOptions, scan
from kvforensics.scan.report import write_report


@pytest.fixture(scope="module")
def written(fleet_dir, tmp_path_factory):
    fleet = scan([str(fleet_dir)], ScanOptions(), jobs=1)
    out = tmp_path_factory.mktemp("report")
    return fleet, write_report(fleet, out)


def test_report_lists_every_node_and_links_its_figures(written):
    fleet, paths = written
    md = paths[0].read_text()
    for n in fleet.nodes:
        assert f"| `{n.node}` | {n.rounds} |" in md
    for png in paths[1:]:
        assert f"![{png.name}]({png.name})" in md
    agent = next(n for n in fleet.nodes if n.node.endswith("agent"))
    first = agent.whole_log.gap_admissions[0]
    assert f"| {first.round} | {first.time} | {first.victim_rid} | {first.unreserved_tail} |" in md
    assert "fixed refuses 1 request(s): as-xpkq7d03n5 (round 0, first token +4.00 s)" in md


def test_figures_are_pictures(written):
    _, paths = written
    for png in paths[1:]:
        with Image.open(png) as im:
            assert im.format == "PNG" and im.size[0] > 400 and im.size[1] > 100


def test_a_fleet_with_nothing_to_show_still_gets_its_figures(tmp_path):
    from tests.conftest import FIXTURES

    fleet = scan([str(FIXTURES / "logs" / "clean")], ScanOptions(), jobs=1)
    paths = write_report(fleet, tmp_path / "r")
    assert [p.name for p in paths] == [
        "report.md",
        "gap-admissions.png",
        "margins.png",
        "refused.png",
    ]
    assert "0 admission(s) through a gap" in paths[0].read_text()
