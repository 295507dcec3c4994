"""The reader's notes (cut gzip, cut last line, NUL bytes, unreadable and unmatched lines)
reach the user from every command that reads logs, and report.md has a section for them."""

import gzip
import json

import pytest

from tests.reliability._logs import SAMPLE
from tests.reliability._run import run_cli


def _damaged(tmp_path):
    text = SAMPLE.read_bytes()
    cut_gz = tmp_path / "pp0.log.gz"
    cut_gz.write_bytes(gzip.compress(text)[:-40])  # the stream ends early
    cut_line = tmp_path / "cutline.log"
    cut_line.write_bytes(text + b"[2026-11-02 15:16:30 PP0] AttentionStore wri")
    nul = tmp_path / "nul.log"  # a zero-filled tail past the first 64 KiB (those are sniffed)
    filler = b"[2026-11-02 09:00:00 PP0] Load weight begin. avail mem=139.21 GB\n" * 1200
    at = text.index(b"\n") + 1
    nul.write_bytes(text[:at] + filler + text[at:] + b"\x00" * 64)
    return {
        cut_gz: "gzip stream ends early",
        cut_line: "ends in a cut line",
        nul: "NUL bytes",
    }


def test_every_log_command_passes_the_notes_on(tmp_path):
    for log, says in _damaged(tmp_path).items():
        for args in (
            ("rounds", log),
            ("replay", log),
            ("diff", log),
            ("explain", log, "--round", "0"),
            ("diff", log, "--format", "json"),
        ):
            out = run_cli(*args)
            assert out.code in (0, 3, 4), (args, out.stderr)
            assert says in out.stdout + out.stderr, (args, out.stdout[-500:], out.stderr)
        out = run_cli("parse", log, "-o", tmp_path / "e.parquet")
        assert out.code == 0 and says in out.stdout, out.stdout


def test_report_md_has_a_section_for_them(tmp_path):
    for i, (log, says) in enumerate(_damaged(tmp_path).items()):
        out_dir = tmp_path / f"rep{i}"
        out = run_cli("report", log, "-o", out_dir)
        assert out.code == run_cli("replay", log).code, out.stderr  # it exits as replay does
        md = (out_dir / "report.md").read_text()
        section = md.split("## What the logs could not tell", 1)[1].split("\n## ", 1)[0]
        assert says in section, section


def test_whole_log_says_so_in_the_report(tmp_path):
    out = run_cli("report", SAMPLE, "-o", tmp_path / "rep")
    assert out.code == run_cli("replay", SAMPLE).code, out.stderr
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## What the logs could not tell\n\n- nothing: every file read to its end" in md


def test_long_values_are_shortened_in_tables(tmp_path):
    rid = "r" * 100_000
    log = tmp_path / "long.log"
    log.write_text(SAMPLE.read_text().replace("as-xpkq7d03n5", rid))
    for cmd in ("rounds", "replay"):
        out = run_cli(cmd, log, columns=80)
        assert out.code == 0, out.stderr  # the sample agrees with the model
        assert len(out.stdout) < 20_000 and "more)…" in out.stdout
    # JSON keeps the value whole
    out = run_cli("rounds", log, "--format", "json")
    assert rid in out.stdout


@pytest.mark.slow  # exec and scan, table and JSON, on every damaged log
def test_exec_and_scan_pass_the_notes_on(tmp_path):
    for log, says in _damaged(tmp_path).items():
        out = run_cli("exec", log, "--device", "cpu")
        assert out.code == 0, (log, out.stderr)
        assert says in out.stderr, (log, out.stderr)
        out = run_cli("exec", log, "--device", "cpu", "--format", "json")
        assert out.code == 0 and says in out.stderr, (log, out.stderr)
        assert any(says in n for n in json.loads(out.stdout)["log_notes"]), out.stdout
        node = tmp_path / f"node-{log.stem}"
        node.mkdir()
        (node / log.name).write_bytes(log.read_bytes())
        for fmt in ("table", "json"):
            out = run_cli("scan", node, "--jobs", "1", "--format", fmt)
            assert out.code == 0, (log, out.stderr)
            assert says in out.stdout, (log, fmt, out.stdout[-800:])
