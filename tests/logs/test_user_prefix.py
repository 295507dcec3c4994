"""A deployment's own line prefix as data, its samples checked on load; cut lines."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvforensics.errors import InputError
from kvforensics.logs import load_catalogue, read_events
from tests.logs.conftest import run_cli

WRAPPED = """\
[prefix]
regex = '^(?P<time>\\d{4}-\\d{2}-\\d{2} \\d{2}:\\d{2}:\\d{2}) (?:ERROR|INFO|WARNING) \\d+ \\[(?P<rank>(?: ?(?:TP|PP|DP|EP)\\d+)*) [\\w./]+:\\d+\\] '

[[prefix.samples]]
line = "2026-03-02 10:11:12 ERROR 4242 [ TP6 PP0 scheduler.py:120] x"
expect = { time = "2026-03-02 10:11:12.000", rank = "TP6 PP0", tp = 6, pp = 0 }
"""

LINE = (
    "2026-03-02 10:11:12 INFO 4242 [ TP6 PP0 scheduler.py:120] Prefill batch, #new-seq: 3, "
    "#new-token: 16377, #cached-token: 102144, token usage: 0.99, #running-req: 0, #queue-req: 41"
)


def test_a_prefix_of_its_own_reads_time_rank_and_messages(tmp_path):
    fmt = tmp_path / "site.toml"
    fmt.write_text(WRAPPED)
    log = tmp_path / "site.log"
    log.write_text(LINE + "\n")
    ev, _ = read_events([log])  # not readable with SGLang's prefix alone
    assert ev.height == 0
    ev, s = read_events([log], extra_formats=[fmt])
    (row,) = ev.to_dicts()
    assert (row["kind"], row["new_token"], row["token_usage"]) == ("prefill_batch", 16377, 0.99)
    assert (row["rank"], row["tp"], row["pp"], row["time"].hour) == ("TP6 PP0", 6, 0, 10)
    assert s.unmatched == 0


def test_a_failing_prefix_sample_is_a_one_line_error(tmp_path):
    fmt = tmp_path / "site.toml"
    fmt.write_text(WRAPPED.replace("tp = 6", "tp = 7"))
    with pytest.raises(InputError, match=r"site.toml: \[prefix\] sample 1: tp is 6, expected 7"):
        load_catalogue([fmt])
    (tmp_path / "x.log").write_text(LINE + "\n")
    out = run_cli("parse", tmp_path / "x.log", "--formats", fmt, "-o", tmp_path / "e.ndjson")
    assert out.returncode == 2 and "sample 1" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def test_a_failing_format_sample_names_format_and_sample(tmp_path):
    fmt = tmp_path / "mine.toml"
    fmt.write_text(
        "[[format]]\nname = 'kv_done'\nliteral = 'KV done'\n"
        "regex = '^KV done: rid=(?P<rid>\\S+) ms=(?P<ms_taken>\\d+)'\n"
        "fields = { rid = 'str', ms_taken = 'int' }\n"
        "[[format.samples]]\nline = '[2026-11-02 15:16:26 PP0] KV done: rid=a ms=12'\n"
        "expect = { rid = 'a', ms_taken = 12 }\n"
        "[[format.samples]]\nline = '[2026-11-02 15:16:26 PP0] KV done: rid=b ms=1.5'\n"
        "expect = { rid = 'b', ms_taken = 2 }\n"
    )
    with pytest.raises(InputError, match=r"format 'kv_done' sample 2 .*ms_taken is 1, expected 2"):
        load_catalogue([fmt])


FULL = (
    "[2026-11-02 15:16:27 PP3] Prefill batch, #new-seq: 3, #new-token: 16377, "
    "#cached-token: 102144, token usage: 0.99, #running-req: 0, #queue-req: 41, "
    "#inflight-req: 17, input throughput (token/s): 20471.25"
)
FIELDS = (
    "new_seq",
    "new_token",
    "cached_token",
    "token_usage",
    "running_req",
    "queue_req",
    "inflight_req",
    "input_throughput",
)


def _last(tmp_path, text):
    p = tmp_path / "cut.log"
    p.write_text(text)  # no newline at the end: the last line may be cut
    ev, s = read_events([p])
    return ev.row(ev.height - 1, named=True), s


@functools.cache
def _whole_line() -> dict:
    """The uncut line's fields, read once for every cut of it."""
    with tempfile.TemporaryDirectory() as d:
        return _last(Path(d), FULL + "\n")[0]


def test_the_last_field_of_a_cut_line_is_null(tmp_path):
    row, s = _last(tmp_path, FULL[: FULL.index("0.99") + 3])  # `token usage: 0.9`
    assert row["token_usage"] is None and row["cached_token"] == 102144
    assert row["truncated"] and s.cut_lines


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(cut=st.integers(len("[2026-11-02 15:16:27 PP3] Prefill batch, "), len(FULL)))
def test_a_cut_line_never_gives_a_wrong_number(tmp_path, cut):
    want = _whole_line()
    got, _ = _last(tmp_path, FULL[:cut])
    for f in FIELDS:
        assert got[f] is None or got[f] == want[f], f


BRACKETS = """\
[prefix]
regex = '^\\[(?P<time>\\d{4}-\\d{2}-\\d{2} \\d{2}:\\d{2}:\\d{2})\\]\\[[\\w./]+:\\d+\\]\\[[A-Z]+\\]: (?:\\[(?P<rank>(?: ?(?:TP|PP|DP|EP)\\d+)*)\\] )?'

[[prefix.samples]]
line = "[2026-03-02 10:11:12][scheduler.py:120][INFO]: [TP3] x"
expect = { time = "2026-03-02 10:11:12.000", rank = "TP3", tp = 3 }
"""


def test_a_bracketed_prefix_with_file_and_level(tmp_path):
    fmt = tmp_path / "site.toml"
    fmt.write_text(BRACKETS)
    log = tmp_path / "site.log"
    log.write_text(
        "[2026-03-02 10:11:12][scheduler.py:120][ERROR]: [TP3] Prefill out of memory. "
        "Try to lower your batch size.\nTry to allocate 512 tokens.\n"
        "Available tokens: 100 (available_size=40 + evictable_size=60)\n"
    )
    ev, s = read_events([log], extra_formats=[fmt])
    (row,) = ev.to_dicts()
    assert (row["kind"], row["oom_tokens"], row["oom_available_size"], row["tp"]) == (
        "oom",
        512,
        40,
        3,
    )
    assert s.unmatched == 0
