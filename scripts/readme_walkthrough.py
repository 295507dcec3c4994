"""Regenerate the incident walk-through from real output.

Runs `replay`, `rounds` and `report` on the shipped incident logs at 100 columns and
rewrites the blocks between the `<!-- walkthrough:NAME -->` markers: `replay` in
README.md, `rounds` and `report` in docs/incident-2026-11-02.md; copies the report's
figures to docs/img. Run from the repository root:

    python scripts/readme_walkthrough.py
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INC = "fixtures/logs/incident"
LOGS = [f"{INC}/pp0.log", f"{INC}/pp1.log.gz", f"{INC}/pp3.log"]
WIDTH = "100"
#: the page that holds each block
PAGES = {"replay": "README.md", "rounds": "docs/incident-2026-11-02.md",
         "report": "docs/incident-2026-11-02.md"}  # fmt: skip


def run(*args: str) -> str:
    env = {**os.environ, "COLUMNS": WIDTH}
    out = subprocess.run(
        [sys.executable, "-m", "kvforensics", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    ).stdout
    return "\n".join(line.rstrip() for line in out.splitlines())


def _section(md: str, start: str, end: str) -> str:
    a = md.index(start)
    return md[a : md.index(end, a)].rstrip()


def report_excerpt(md: str) -> str:
    """The parts of report.md a reader of the incident page needs, quoted as they render."""
    first = md.splitlines()[0].replace("# ", "#### ", 1)
    parts = [
        first,
        "",
        _section(md, "## Summary", "## What happened").replace("## Summary", "**Summary.**"),
        "",
        _section(md, "### 2. ", "### 3. ")
        .replace("### 2. ", "**2. ")
        .replace("alignment gap", "alignment gap.**", 1),
        "",
        _section(md, "### 3. ", "### 4. ")
        .replace("### 3. ", "**3. ")
        .replace("its load-back", "its load-back.**", 1),
        "",
        "(... 1. the admission check, 4. the pieces that followed, 5. the out of memory ...)",
        "",
        _section(md, "The cost is time", "How the replay"),
        "",
        _section(md, "The same run under the other", "## What the fix does not cover"),
        "",
        "(... the fix's limits, figures, and the evidence: the causes checked, the "
        "configuration with its log lines, the rebuilt rounds with their evidence, fidelity, "
        "round R's books under `prefix` and `fixed`, per-round tables ...)",
    ]
    return "\n".join(f"> {line}" if line else ">" for line in "\n".join(parts).splitlines())


def blocks() -> dict[str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "incident"
        subprocess.run(
            [sys.executable, "-m", "kvforensics", "report", *LOGS, "-o", str(out)],
            cwd=ROOT, check=True, capture_output=True,
        )  # fmt: skip
        shutil.copy(out / "pool.png", ROOT / "docs/img/incident-pool.png")
        shutil.copy(out / "waterfall-round-7747.png", ROOT / "docs/img/incident-waterfall.png")
        excerpt = report_excerpt((out / "report.md").read_text())
    rounds = [f"{INC}/pp0.log", f"{INC}/pp3.log", "--last", "4"]
    return {
        "replay": "```\n$ kvforensics replay "
        + " ".join(LOGS)
        + "\n"
        + run("replay", *LOGS)
        + "\n```",
        "rounds": "```\n$ kvforensics rounds "
        + " ".join(rounds)
        + "\n"
        + run("rounds", *rounds)
        + "\n```",
        "report": excerpt,
    }


def main() -> None:
    texts = {page: (ROOT / page).read_text() for page in set(PAGES.values())}
    for name, body in blocks().items():
        page = PAGES[name]
        pat = re.compile(
            rf"(<!-- walkthrough:{name} -->\n).*?(\n<!-- /walkthrough:{name} -->)", re.S
        )
        if not pat.search(texts[page]):
            raise SystemExit(f"{page} has no walkthrough:{name} markers")
        texts[page] = pat.sub(lambda m, b=body: m.group(1) + b + m.group(2), texts[page])
    for page, text in texts.items():
        (ROOT / page).write_text(text)


if __name__ == "__main__":
    main()
