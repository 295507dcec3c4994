"""A user's ``--formats`` samples say what they parse to in any form a TOML file holds:
times with or without fractional seconds, quoted or TOML's own; an expectation that is no
time at all is a one-line error naming the sample."""

from __future__ import annotations

import pytest

from tests.conftest import FIXTURES
from tests.reliability._run import run_cli

LOG = FIXTURES / "logs" / "samples" / "incident-pp1.log"
PREFIX = """\
[prefix]
regex = '^(?P<time>\\d{4}-\\d{2}-\\d{2} \\d{2}:\\d{2}:\\d{2}) INFO \\d+ \\[(?P<rank>(?: ?(?:TP|PP)\\d+)*) [\\w./]+:\\d+\\] '

[[prefix.samples]]
line = "%s INFO 4242 [ TP6 PP0 scheduler.py:120] x"
expect = { time = %s, rank = "TP6 PP0", tp = 6, pp = 0%s }
"""
FORMAT = """\
[[format]]
name = 'kv_done'
literal = 'KV done'
regex = '^KV done: rid=(?P<rid>\\S+) ms=(?P<ms_taken>\\d+)'
fields = { rid = 'str', ms_taken = 'int' }
[[format.samples]]
line = '[2026-11-02 15:16:26 PP0] KV done: rid=a ms=12'
expect = { rid = 'a', ms_taken = 12, time = %s }
"""


def _parse(tmp_path, text):
    fmt = tmp_path / "site.toml"
    fmt.write_text(text)
    return run_cli("parse", LOG, "--formats", fmt, "-o", tmp_path / "e.parquet")


@pytest.mark.parametrize(
    ("line_time", "expect_time", "more"),
    [
        ("2025-06-05 15:08:56", '"2025-06-05 15:08:56"', ""),  # no fractional seconds
        ("2025-06-05 15:08:56", "2025-06-05 15:08:56", ""),  # a TOML date-time
        ("2025-06-05 15:08:56", '"2025-06-05T15:08:56"', ", clock = 15:08:56"),
        ("2025-06-05 15:08:56", '"2025-06-05 15:08:56"', ', clock = "15:08:56"'),
    ],
)
def test_prefix_sample_times_in_every_form(tmp_path, line_time, expect_time, more):
    out = _parse(tmp_path, PREFIX % (line_time, expect_time, more))
    assert out.code == 0, out.stderr


@pytest.mark.parametrize(
    ("expect_time", "says"),
    [
        ('"yesterday"', "expects time 'yesterday', which is not a date and time"),
        ("2025-06-05", "expects time datetime.date(2025, 6, 5), which is not a date and time"),
        ("15", "expects time 15, which is not a date and time"),
    ],
)
def test_a_sample_time_that_is_no_time_is_one_line(tmp_path, expect_time, says):
    out = _parse(tmp_path, PREFIX % ("2025-06-05 15:08:56", expect_time, ""))
    assert out.code == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith(f"error: {tmp_path / 'site.toml'}: [prefix] sample 1: ") and says in line


def test_a_format_sample_may_expect_its_time(tmp_path):
    assert _parse(tmp_path, FORMAT % '"2026-11-02 15:16:26"').code == 0
    out = _parse(tmp_path, FORMAT % '"2026-11-02 15:16:27"')
    assert out.code == 2 and "format 'kv_done' sample 1" in out.stderr, out.stderr
    assert "time is datetime.datetime(2026, 11, 2, 15, 16, 26)" in out.stderr
