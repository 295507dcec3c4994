"""The project's documentation holds together on its own: the README stays short, every
relative link in it and in docs/ resolves inside the project, and no file cites material
from outside the project (its own pages under docs/ say the same things)."""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README_MAX_BYTES = 15 * 1024
#: ``[text](target)`` and ``![alt](target)``; the target up to a space or ``)``
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
#: a path whose first folder is the outside material's (with any ``../`` before it); the
#: folder names are joined at run time so this file does not match itself
OUTSIDE = re.compile(r"(?<![\w.-])(?:\.\./)*(?:" + "shared" + "|" + "spec" + r")/")
SKIP_DIRS = {
    ".git", ".hypothesis", ".pytest_cache", "__pycache__", ".ruff_cache", ".mypy_cache",
    "node_modules", "build", "dist",
}  # fmt: skip
BINARY = {".png", ".gz", ".parquet", ".pyc", ".whl", ".so"}


def pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """``page: target`` for every relative link whose file is not in the project ``root``."""
    out = []
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code is not a link
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL or an anchor on the same page
        path = (page.parent / target.split("#", 1)[0]).resolve()
        if not path.exists() or root.resolve() not in path.parents:
            out.append(f"{page.relative_to(root)}: {target}")
    return out


def project_files(root: Path):
    """Every file of the project tree that is text, virtual environments and build output
    left out (pruned, not walked: a virtual environment holds tens of thousands of files)."""
    for folder, dirs, files in os.walk(root):
        # build output (an editable install's egg-info copies the README as it was then)
        dirs[:] = sorted(
            d for d in dirs
            if d not in SKIP_DIRS and not d.startswith(".venv") and not d.endswith(".egg-info")
        )  # fmt: skip
        for name in sorted(files):
            path = Path(folder) / name
            if path.suffix not in BINARY:
                yield path


def outside_citations(root: Path) -> list[str]:
    """``path:line`` for every line that cites a path outside the project."""
    out = []
    for path in project_files(root):
        text = path.read_text(errors="replace")
        lines = sorted({text.count("\n", 0, m.start()) + 1 for m in OUTSIDE.finditer(text)})
        out += [f"{path.relative_to(root)}:{n}" for n in lines]
    return out


def test_readme_is_short():
    size = (ROOT / "README.md").stat().st_size
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes; move detail into docs/"


def test_every_relative_link_resolves():
    assert [b for page in pages() for b in broken_links(page)] == []


def test_the_docs_pages_are_linked_from_the_readme():
    readme = (ROOT / "README.md").read_text()
    for page in (ROOT / "docs").glob("*.md"):
        assert f"docs/{page.name}" in readme, f"README.md does not point to docs/{page.name}"


def test_no_file_cites_material_outside_the_project():
    assert outside_citations(ROOT) == []


def test_the_checks_find_what_they_look_for(tmp_path):
    root = tmp_path / "project"
    (root / "docs").mkdir(parents=True)
    page = root / "docs" / "a.md"
    page.write_text(
        "[ok](a.md) [gone](missing.md#x) ![img](../img.png) [web](https://example.org) "
        "[here](#top)\n```\n[in code](nowhere.md)\n```\n"
    )
    (root / "img.png").write_bytes(b"")
    assert broken_links(page, root) == ["docs/a.md: missing.md#x"]
    page.write_text("[out of the project](../../elsewhere.md)\n")
    (tmp_path / "elsewhere.md").write_text("")
    assert broken_links(page, root) == ["docs/a.md: ../../elsewhere.md"]
    (root / "m.py").write_text('"""From ``' + "spec" + '/causes.md``."""\n')
    (root / "n.md").write_text("ok\nsee ../" + "shared" + "/sp" + "ec/x.md\nnot myshared/x\n")
    assert sorted(outside_citations(root)) == ["m.py:1", "n.md:2"]
