"""At 80 columns (the width of a pipe) tables turn into blocks: nothing is cut."""

import re

import pytest

from tests.cli.test_options import INC, SCENARIO, cli

RIDS = ("as-v9ujq2m0c1", "as-1keim4u1e8", "as-xpkq7d03n5")


@pytest.mark.parametrize(
    "args",
    [
        ("explain", SCENARIO, "--round", "0"),
        ("diff", SCENARIO),
        ("rounds", INC / "pp0.log", INC / "pp3.log", "--last", "4"),
        ("replay", INC / "pp0.log", INC / "pp3.log"),
    ],
)
@pytest.mark.parametrize("columns", [80, 200])
def test_no_value_cut_at_any_width(args, columns):
    r = cli(*args, columns=columns)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert max(len(x) for x in lines) <= columns
    # a cut shows as an ellipsis; only a preview of an unmatched log line may end in one
    cut = [x for x in lines if "…" in x and "unmatched:" not in x and not x.endswith(" …")]
    assert not cut, cut
    words = set(re.findall(r"[\w.-]+", r.stdout))
    assert {"as-1keim4u1e8"} <= words or args[0] != "rounds"
    if args[0] in ("explain", "diff"):
        assert set(RIDS) <= words


def test_explain_headers_are_distinct_and_whole_at_80():
    out = cli("explain", SCENARIO, "--round", "0", columns=80).stdout
    assert re.search(r"^\s+rem_total_token_offset\s+16321 → 16578$", out, re.M)
    assert re.search(r"^\s+rem_total_tokens\s+18303$", out, re.M)
    assert re.search(r"^\s+rem_total_tokens\s+13310$", out, re.M)  # fixed's refusal of C


def test_prose_has_a_hanging_indent():
    out = cli("replay", INC / "pp0.log", columns=80).stdout
    verdict = out[out.index("Verdict") :].splitlines()[1:4]
    assert verdict[0].startswith("  as-1keim4u1e8") and verdict[1].startswith("    ")


def test_previews_cut_at_a_word_never_inside_a_number():
    out = " ".join(cli("replay", INC / "pp0.log", columns=80).stdout.split())
    previews = re.findall(r"unmatched: \S+?:(\d+): (.*?)(?= unmatched:| Logged| No out)", out)
    assert len(previews) == 3
    lines = (INC / "pp0.log").read_text().splitlines()
    for no, shown in previews:
        full = " ".join(lines[int(no) - 1].split())
        if shown.endswith(" …"):
            kept = shown[:-2]
            assert full.startswith(kept) and full[len(kept)] == " ", (kept, full)
        else:
            assert shown == full


def _numbers_whole(shown: str, full: str) -> None:
    """``shown`` is ``full`` or a marked cut of it that ends outside a number."""
    if shown == full:
        return
    kept = re.sub(r"( …|…\(\d+ more characters\))$", "", shown)
    assert kept != shown, f"a cut without a mark: {shown!r}"
    assert full.startswith(kept), (kept, full)
    nxt = full[len(kept)]
    assert not (kept[-1:].isdigit() and (nxt.isdigit() or nxt == ".")), (kept, full)


@pytest.mark.parametrize("columns", [80, 200])
def test_parse_previews_never_cut_a_number(tmp_path, columns):
    # numbers at and around the old fixed 160-character cut
    head = "[2026-12-01 08:00:00 PP0] Memory pool end. "
    fill = " ".join(f"k{i}={10**6 + i * 1111}.{i:02d}" for i in range(40))
    pad = " ".join(["padding"] * ((150 - len(head)) // 8))
    lines = [head + fill, f"{head}{pad} avail mem=139.21 GB, tokens=1234567 free=98765.4321"]
    log = tmp_path / "odd.log"
    log.write_text("\n".join(lines) + "\n")
    r = cli("parse", log, "-o", tmp_path / "events.parquet", columns=columns)
    assert r.returncode == 0, r.stderr
    out = " ".join(r.stdout.split())
    shown = re.findall(r"odd\.log:(\d+): (.*?)(?= \S+odd\.log:\d+:|$)", out)
    assert [int(n) for n, _ in shown] == [1, 2]
    for no, text in shown:
        _numbers_whole(text, " ".join(lines[int(no) - 1].split()))
