"""Numbers a log cannot mean make the line unreadable (counted, sampled, not used)."""

import json

import polars as pl

from kvforensics.logs import read_events
from tests.reliability._logs import write_log
from tests.reliability._run import run_cli

ADDER_B = "seq_len=94024, prefix_len=12992"


def _read(tmp_path, replace):
    return read_events([write_log(tmp_path, replace)])


def test_good_sample_has_no_unreadable_line(tmp_path):
    _, summary = _read(tmp_path, {})
    assert summary.unreadable == 0 and summary.unreadable_samples == []


def test_each_impossible_number_drops_its_line(tmp_path):
    cases = [
        (ADDER_B, (f"seq_len={2**64}, prefix_len=12992", "seq_len does not fit 64 bits")),
        ("prefix_len=12992", ("prefix_len=-5", "prefix_len=-5 is negative")),
        ("extend=[86784, 89088)", ("extend=[89088, 86784)", "ends before it starts")),
        ("blocks=348, block_size=256", ("blocks=348, block_size=0", "block_size=0 must be positive")),
        ("blocks=359", (f"blocks={2**41}", "beyond any pool")),
        # one block, or all of them together, larger than any pool (fuzz seed 72001700: an
        # OverflowError, exit 70, when the round's tokens no longer fit 64 bits)
        ("blocks=348, block_size=256", (f"blocks=348, block_size={2**62}", "beyond any pool")),
        ("blocks=348, block_size=256", (f"blocks={2**30}, block_size={2**20}", "x block_size")),
        # SGLang always leaves a token to compute: 12992 + 73792 >= 64 cannot be logged
        (ADDER_B, ("seq_len=64, prefix_len=12992", "(86784) leave nothing of seq_len=64")),
    ]
    good, _ = _read(tmp_path, {})
    for old, (new, why) in cases:
        events, summary = _read(tmp_path, {old: new})
        assert summary.unreadable == 1, (old, summary.unreadable_samples)
        ((path, line, text),) = summary.unreadable_samples
        assert path.endswith("pp0.log") and why in text, text
        assert events.height == good.height - 1
        # the dropped line is the damaged one, and the rest are unchanged
        assert line not in events["line"].to_list()
        assert events.equals(good.filter(pl.col("line") != line))


def test_all_minus_one_log_ends(tmp_path):
    """Six lines whose adder numbers are all -1: the rounds command finishes at once,
    and with every adder line unusable there is no round: one line saying why."""
    head = write_log(tmp_path).read_text().splitlines()[:3]
    body = [
        "[2026-11-02 15:16:26 PP0] PrefillAdder.add_one_req: rid=a, seq_len=-1, prefix_len=-1, "
        "host_hit_len=-1, rem_chunk_tokens=-1, local rem total: -1, current rem_total_tokens: -1, "
        "cur_rem_tokens: -1",
        "[2026-11-02 15:16:26 PP0] PrefillAdder.add_one_req result: rid=a, decision=truncated, "
        "extend=[-1, -1), result=CONTINUE",
        "[2026-11-02 15:16:27 PP0] AttentionStore write: rid=a, blocks=-1, block_size=-1",
    ]
    log = tmp_path / "minus.log"
    log.write_text("\n".join(head + body) + "\n")
    out = run_cli("rounds", log)
    assert out.code == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert "3 line(s) hold numbers a log cannot mean" in line and "no round" in line
    assert run_cli("replay", log).code == 2  # nothing left to replay: a one-line error


def test_oom_without_size_is_kept_but_not_computed_with(tmp_path):
    log = write_log(tmp_path, {"Try to allocate 2056 tokens.\n": "Try to allocate  tokens.\n"})
    out = run_cli("rounds", log, "--format", "json")
    assert out.code == 0, out.stderr
    got = json.loads(out.stdout)
    # kept: the line is the rebuild's out-of-memory, with what it did say
    oom = got["oom"]
    assert oom is not None and oom["tokens"] is None
    assert (oom["available"], oom["where"]) == (0, "pp0.log:16")
    # not computed with: no piece of that size is placed, nor a request blamed for it
    last = got["rounds"][-1]
    assert last["oom"] == oom and last["pieces"] == [] and oom["rid"] is None
    assert got["contradictions"] == []
