"""An unmatched line that is one huge number is previewed cut, with its length said."""

from tests.reliability._run import run_cli


def test_parse_previews_a_huge_number_cut(tmp_path):
    log = tmp_path / "x.log"
    log.write_text(
        "[2026-11-02 15:16:30 TP1] Decode batch, #running-req: 7, #token: 70210, "
        "token usage: 0.27, cuda graph: True, gen throughput (token/s): 512.30, #queue-req: 2\n"
        + "9" * 65536
        + "\n"
    )
    out = run_cli("parse", log, "-o", tmp_path / "out.ndjson", columns=200)
    assert out.code == 0, out.stderr
    assert "…(cut inside a number of " in " ".join(out.stdout.split())
    assert "9" * 1000 not in out.stdout
