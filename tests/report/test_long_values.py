"""A damaged log's huge rid stays a value, not a page: the report's figures keep the size
they have with the logged rids. 2,000 characters (far past the 72 shown) in the default
run; the 100,000 of the fuzzer's finding in the slow one, since the terminal's output of
a rid that long takes minutes to print."""

import re
import struct

import pytest

from tests.conftest import FIXTURES
from tests.reliability._run import run_cli

LOG = FIXTURES / "logs" / "samples" / "incident-pp0.log"
WHO = ["as-xpkq7d03n5", "as-1keim4u1e8"]
LENGTHS = [2_000, pytest.param(100_000, marks=pytest.mark.slow)]


def _figures(log, out) -> dict[str, tuple[int, int]]:
    r = run_cli("report", log, "-o", out)
    assert r.code == run_cli("replay", log).code, r.stderr  # report exits as replay does
    # a PNG's width and height are the first two fields of its IHDR chunk
    return {p.name: struct.unpack(">II", p.read_bytes()[16:24]) for p in out.glob("*.png")}


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("who", WHO)
def test_figures_keep_their_size_with_a_huge_rid(who, length, tmp_path):
    ref = _figures(LOG, tmp_path / "ref")
    long = tmp_path / "long.log"
    long.write_bytes(LOG.read_bytes().replace(who.encode(), b"x" * length))
    got = _figures(long, tmp_path / "long")
    assert set(got) == set(ref) >= {"pool.png", "waterfall-round-0.png"}
    for name, (w, h) in got.items():
        rw, rh = ref[name]
        assert w < 1.5 * rw and h < 1.5 * rh, (name, (w, h), (rw, rh))


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("who", WHO)
def test_report_md_shortens_a_huge_rid_the_same_way_everywhere_and_the_data_keep_it(
    who, length, tmp_path
):
    rid = "x" * length
    long = tmp_path / "long.log"
    long.write_bytes(LOG.read_bytes().replace(who.encode(), rid.encode()))
    assert run_cli("report", long, "-o", tmp_path / "long").code == run_cli("replay", long).code
    md = (tmp_path / "long" / "report.md").read_text()
    assert run_cli("report", LOG, "-o", tmp_path / "ref").code == run_cli("replay", LOG).code
    ref_md = (tmp_path / "ref" / "report.md").read_text()
    assert rid not in md and who not in md
    assert len(md) < 2 * len(ref_md)
    shown = set(re.findall(r"x+…\(\d+ more\)…x+", md))
    assert len(shown) == 1, shown  # one form, whatever punctuation follows the rid
    assert md.count(shown.pop()) == ref_md.count(who) > 0
    assert "shortened in this file" in md and "shortened in this file" not in ref_md
    for name in ("ledger.csv", "events.csv"):
        assert rid in (tmp_path / "long" / name).read_text(), name
