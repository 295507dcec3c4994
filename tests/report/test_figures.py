"""The round's book in the waterfall is the adder's records, read, not re-derived."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from kvforensics.replay import ReplayOptions, replay_logs
from kvforensics.report.figures import waterfall_steps
from kvforensics.synth.incidents import page_granularity

INC = Path(__file__).parents[2] / "fixtures" / "logs" / "incident"


#: other page and align sizes than the incident's (free counts that are not whole pages)
OTHERS = {"page16": {"page": 16, "free": 12008}, "page128-align512": {"page": 128, "align": 512}}


@pytest.fixture(scope="module", params=["incident", *OTHERS])
def replayed(request, tmp_path_factory):
    if request.param == "incident":
        paths = [INC / "pp0.log", INC / "pp1.log.gz", INC / "pp3.log"]
    else:
        inc = page_granularity(**OTHERS[request.param])
        paths = inc.write(tmp_path_factory.mktemp(request.param))
    return replay_logs(paths, ReplayOptions(["fixed"]))


def test_checks_and_ends_are_the_records(replayed):
    rr = replayed
    for policy in ("prefix", "fixed"):
        df = rr.results[policy].ledger.to_frame().filter(pl.col("round") == rr.start_round)
        rows = df.filter(pl.col("call") != "allocate").sort("step").to_dicts()
        start, bars, end, _ = waterfall_steps(df)
        assert start == rows[0]["baseline"]
        assert end == rows[-1]["baseline_after"] - rows[-1]["total_offset_after"]
        checks = [b for b in bars if b[1].startswith("check")]
        assert checks, "no request came after the truncation"
        for label, kind, need, at in checks:
            rec = next(r for r in rows if label.startswith(r["rid"] + "\n") and r["need"] == need)
            assert at == rec["rem_total_tokens"]
            refused = rec["decision"] == "rejected" and rec["budget_state"] == "NO_TOKEN"
            assert (kind == "check-fails") == refused
    # the tail prefix leaves unreserved is what fixed reserves for it
    pre = waterfall_steps(rr.results["prefix"].ledger.to_frame().filter(pl.col("round") == rr.start_round))
    fix = waterfall_steps(rr.results["fixed"].ledger.to_frame().filter(pl.col("round") == rr.start_round))
    assert pre[3] > 0 and fix[3] == 0
    assert -sum(b[2] for b in fix[1] if b[1] == "reserve") == pre[3]
