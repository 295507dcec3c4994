"""`kvforensics parse` as a user runs it: outputs, summary, and one-line errors on bad input."""

from __future__ import annotations

import gzip
import json

import polars as pl
import pytest

from tests.logs._files import file_with

from .conftest import run_cli


def _one_line_error(r) -> str:
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    return lines[0]


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".ndjson"])
def test_parse_writes_each_output_type(samples, tmp_path, suffix):
    out = tmp_path / f"events{suffix}"
    logs = [samples / f"incident-pp{i}.log" for i in (0, 1, 3)]
    r = run_cli("parse", *logs, "-o", out)
    assert r.returncode == 0, r.stderr
    assert "20 events" in r.stdout and "adder_check" in r.stdout
    if suffix == ".parquet":
        df = pl.read_parquet(out)
        assert df.schema["rids"] == pl.List(pl.String)
        assert df.schema["time"] == pl.Datetime("ms")
    elif suffix == ".csv":
        df = pl.read_csv(out, infer_schema_length=0)
        assert "as-v9ujq2m0c1,as-1keim4u1e8,as-xpkq7d03n5" in df["rids"].to_list()
    else:
        df = pl.DataFrame([json.loads(x) for x in out.read_text().splitlines()])
    assert df.height == 20
    oom = df.filter(pl.col("kind") == "oom")
    assert str(oom["oom_tokens"][0]) == "2056"
    assert list(out.parent.glob(".*.tmp")) == []


def test_summary_warns_about_decode_node_and_lists_unmatched(samples, tmp_path):
    r = run_cli(
        "parse",
        samples / "decode-node.log",
        samples / "era-2025-03-tp.log",
        "-o",
        tmp_path / "e.parquet",
    )
    assert r.returncode == 0, r.stderr
    assert "decode or colocated node" in r.stdout
    assert "era-2025-03-tp.log:4: INFO:" in r.stdout


def test_user_formats_option(samples, tmp_path):
    fmt = tmp_path / "mine.toml"
    fmt.write_text(
        "[[format]]\nname = 'http_access'\nliteral = 'INFO:'\n"
        'regex = \'^INFO: +(?P<client>\\S+) - "(?P<request>[^"]*)" (?P<status>\\d+)\'\n'
        "fields = { client = 'str', request = 'str', status = 'int' }\n"
    )
    out = tmp_path / "e.ndjson"
    r = run_cli("parse", samples / "era-2025-03-tp.log", "-o", out, "--formats", fmt)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    (http,) = [x for x in rows if x["kind"] == "http_access"]
    assert (http["client"], http["request"], http["status"]) == (
        "127.0.0.1:40052",
        "POST /generate HTTP/1.1",
        200,
    )


def _gz_cut(d):
    blob = gzip.compress(
        b"".join(f"[2026-11-02 15:16:26 PP0] line {i}\n".encode() for i in range(5000))
    )
    (d / "cut.gz").write_bytes(blob[: len(blob) // 2])
    return d / "cut.gz"


@pytest.mark.parametrize(
    ("make", "msg"),
    [
        (lambda d: d / "missing.log", "no such file"),
        (lambda d: d, "is a directory"),
        (file_with("e.log", b""), "empty file"),
        (file_with("b.bin", bytes(range(256)) * 64), "binary data"),
        (file_with("z.gz", b"\x1f\x8b" + b"\x00" * 40), "no log lines"),
    ],
    ids=["missing", "directory", "empty", "binary", "gzip-garbage"],
)
def test_bad_inputs_one_line_error(tmp_path, make, msg):
    src = make(tmp_path)
    out = tmp_path / "out" / "e.parquet"
    err = _one_line_error(run_cli("parse", src, "-o", out))
    assert msg in err
    assert not out.exists()


def test_damaged_inputs_parse_as_far_as_they_go(samples, tmp_path):
    cut_gz = _gz_cut(tmp_path)
    cut_line = tmp_path / "cutline.log"
    cut_line.write_bytes(
        (samples / "incident-pp0.log").read_bytes()[:-1]
        + b"\n[2026-11-02 15:16:30 PP0] PrefillAdder.add_one_req: rid=as-1, seq_len=94"
    )
    long_line = tmp_path / "long.log"
    long_line.write_text(
        "[2026-11-02 15:16:26 PP0] "
        + "y" * (3 << 20)
        + "\n"
        + (samples / "incident-pp1.log").read_text()
    )
    out = tmp_path / "e.csv"
    r = run_cli("parse", cut_gz, cut_line, long_line, "-o", out)
    assert r.returncode == 0, r.stderr
    assert "gzip stream ends early" in r.stdout
    assert "last line may be cut short" in r.stdout
    df = pl.read_csv(out, infer_schema_length=0)
    assert df.filter(pl.col("file") == str(long_line))["line"].to_list() == ["2", "3"]


def test_never_writes_over_an_input(samples, tmp_path):
    log = tmp_path / "events.csv"  # a log that happens to have an output's name
    log.write_bytes((samples / "incident-pp1.log").read_bytes())
    before = log.read_bytes()
    err = _one_line_error(run_cli("parse", log, "-o", log))
    assert "one of the input files" in err
    assert log.read_bytes() == before


def test_unknown_output_type(samples, tmp_path):
    err = _one_line_error(run_cli("parse", samples / "incident-pp1.log", "-o", tmp_path / "e.xlsx"))
    assert ".parquet, .csv or .ndjson" in err


def test_bad_formats_file_is_one_line_error(samples, tmp_path):
    fmt = tmp_path / "f.toml"
    fmt.write_text("[[format]]\nname='a'\nregex='(x'\n")
    err = _one_line_error(
        run_cli("parse", samples / "incident-pp1.log", "-o", tmp_path / "e.csv", "--formats", fmt)
    )
    assert "invalid regex" in err
