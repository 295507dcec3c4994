"""``rounds -o FILE.parquet`` over a log that ran out of memory: the crash round's row
carries the out-of-memory line's tokens."""

import polars as pl

from tests.conftest import FIXTURES
from tests.reliability._run import run_cli


def test_parquet_rounds_keep_the_out_of_memory(tmp_path):
    log = FIXTURES / "logs" / "samples" / "incident-pp0.log"
    out = tmp_path / "r.parquet"
    r = run_cli("rounds", log, "-o", out)
    assert r.code == 0, r.stderr
    ooms = pl.read_parquet(out).filter(pl.col("oom_tokens").is_not_null())
    # the log's own "Try to allocate" number
    want = int(next(ln for ln in log.read_text().splitlines() if "Try to allocate" in ln).split()[3])
    assert ooms["oom_tokens"].unique().to_list() == [want]
