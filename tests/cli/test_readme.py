"""The incident walk-through is real output (scripts/readme_walkthrough.py regenerates
it): every number the README's replay block and docs/incident-2026-11-02.md's rounds and
report blocks show is one the commands print today."""

import re

import pytest

from tests.cli.test_options import INC, cli
from tests.conftest import ROOT

LOGS = (INC / "pp0.log", INC / "pp1.log.gz", INC / "pp3.log")
NUMBER = re.compile(r"(?<![\w.])[-+]?\d[\d,]*(?:\.\d+)?")


#: which page holds each walk-through block (the README shows the first command's output)
PAGES = {"replay": "README.md", "rounds": "docs/incident-2026-11-02.md",
         "report": "docs/incident-2026-11-02.md"}  # fmt: skip


def block(name: str) -> str:
    text = (ROOT / PAGES[name]).read_text()
    m = re.search(rf"<!-- walkthrough:{name} -->\n(.*?)\n<!-- /walkthrough:{name} -->", text, re.S)
    assert m, f"{PAGES[name]} lost its walkthrough:{name} block"
    return m.group(1)


def numbers(text: str) -> set[str]:
    return set(NUMBER.findall(text))


@pytest.mark.parametrize(
    "name,args",
    [
        ("replay", ("replay", *LOGS)),
        ("rounds", ("rounds", INC / "pp0.log", INC / "pp3.log", "--last", "4")),
    ],
)
def test_walkthrough_blocks_match_the_commands(name, args):
    real = cli(*args, columns=100).stdout
    shown = block(name)
    missing = numbers(shown) - numbers(real)
    assert not missing, (
        f"{PAGES[name]} {name} block shows numbers the command no longer prints: {missing}"
    )


def test_report_excerpt_matches_a_fresh_report(tmp_path):
    out = tmp_path / "incident"
    assert cli("report", *LOGS, "-o", out).returncode == 0
    real = (out / "report.md").read_text()
    missing = numbers(block("report")) - numbers(real)
    assert not missing, missing
