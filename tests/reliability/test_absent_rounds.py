"""Asking for a round that is not there is a one-line error, also when rounds are null."""

import polars as pl
import pytest

from kvforensics.errors import InputError
from kvforensics.report.explain import explain_round
from kvforensics.scenario import load_scenario
from tests.fuzz._cases import SCENARIOS


def test_explain_names_the_rounds_present_despite_null_rounds():
    frame = load_scenario(SCENARIOS[0]).build_node("prefix").run().ledger_frame()
    null = frame.head(1).with_columns(pl.lit(None).cast(frame["round"].dtype).alias("round"))
    damaged = pl.concat([frame, null])
    top = frame["round"].max()
    with pytest.raises(InputError, match=rf"rounds present: 0\.\.{top}\)"):
        explain_round({"prefix": damaged}, 2**31)
