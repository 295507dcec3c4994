"""A damaged log's 100,000-character rid stays a value, not a page: the report's figures
keep the size they have with the logged rids."""

import struct

import pytest

from tests.conftest import FIXTURES
from tests.reliability._run import run_cli

LOG = FIXTURES / "logs" / "samples" / "incident-pp0.log"


def _figures(log, out) -> dict[str, tuple[int, int]]:
    r = run_cli("report", log, "-o", out)
    assert r.code == run_cli("replay", log).code, r.stderr  # report exits as replay does
    # a PNG's width and height are the first two fields of its IHDR chunk
    return {p.name: struct.unpack(">II", p.read_bytes()[16:24]) for p in out.glob("*.png")}


@pytest.mark.parametrize("who", ["as-xpkq7d03n5", "as-1keim4u1e8"])
def test_figures_keep_their_size_with_a_huge_rid(who, tmp_path):
    ref = _figures(LOG, tmp_path / "ref")
    long = tmp_path / "long.log"
    long.write_bytes(LOG.read_bytes().replace(who.encode(), b"x" * 100_000))
    got = _figures(long, tmp_path / "long")
    assert set(got) == set(ref) >= {"pool.png", "waterfall-round-0.png"}
    for name, (w, h) in got.items():
        rw, rh = ref[name]
        assert w < 1.5 * rw and h < 1.5 * rh, (name, (w, h), (rw, rh))
