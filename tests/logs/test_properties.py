"""Properties: the prefix accepts every tag combination; chunking never changes the events."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvforensics.logs import ParseSummary, iter_events, load_catalogue, read_events

CAT = load_catalogue()
TAGS = list(CAT.prefix.tags.items())  # (tag, column), in the catalogue's order

ranks = st.fixed_dictionaries({}, optional={tag: st.integers(0, 4095) for tag, _ in TAGS})


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ranks=ranks, ms=st.none() | st.integers(0, 999), second=st.integers(0, 59))
def test_prefix_accepts_every_tag_combination(tmp_path, ranks, ms, second):
    tags = "".join(f" {tag}{ranks[tag]}" for tag, _ in TAGS if tag in ranks)
    stamp = f"2026-11-02 15:16:{second:02d}" + (f".{ms:03d}" if ms is not None else "")
    p = tmp_path / "p.log"
    p.write_text(f"[{stamp}{tags}] AttentionStore write: rid=as-1, blocks=348, block_size=256\n")
    df, _ = read_events([p])
    row = df.row(0, named=True)
    assert row["kind"] == "as_write" and row["blocks"] == 348
    assert row["time_has_ms"] is (ms is not None)
    assert row["time"].second == second and row["time"].microsecond == (ms or 0) * 1000
    assert row["rank"] == tags.strip()
    for tag, col in TAGS:
        assert row[col] == ranks.get(tag)


def _corpus(samples) -> bytes:
    parts = [(samples / n).read_bytes() for n in sorted(p.name for p in samples.iterdir())]
    return b"".join(parts) + b"noise without newline at the end"


def _events(path, chunk_bytes):
    s = ParseSummary()
    frames = list(iter_events([path], s, chunk_bytes=chunk_bytes, catalogue=CAT))
    return pl.concat(frames), s


@pytest.mark.slow  # the sample logs read again per chunk size and worker count
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(chunk=st.integers(1, 6000), workers=st.integers(1, 3))
def test_chunk_size_never_changes_events(tmp_path_factory, samples, chunk, workers):
    path = tmp_path_factory.mktemp("c") / "all.log"
    path.write_bytes(_corpus(samples))
    want, ws = _events(path, 1 << 24)
    s = ParseSummary()
    got = pl.concat(list(iter_events([path], s, chunk_bytes=chunk, workers=workers, catalogue=CAT)))
    assert got.equals(want)
    assert (s.matched, s.unmatched, s.attached_lines, s.lines) == (
        ws.matched,
        ws.unmatched,
        ws.attached_lines,
        ws.lines,
    )
    assert want.filter(pl.col("kind") == "oom").height == 3
