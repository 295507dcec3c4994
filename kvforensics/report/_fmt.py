"""Text helpers shared by the markdown and terminal renderers."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kvforensics.model.decisions import Call


def num(v: object) -> str:
    """Token counts without separators: the postmortem and the logs print them bare, and
    a reader searches the report for the logged number."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def arrow(a: object, b: object) -> str:
    return num(a) if a == b else f"{num(a)} → {num(b)}"


def pieces(ps: Iterable[tuple[str, int, int]]) -> str:
    return ", ".join(f"{r} [{s}, {e}) {e - s}" for r, s, e in ps) or "-"


def decisions(ds: Iterable[tuple[str, str, str, str]]) -> str:
    out = []
    for call, rid, dec, state in ds:
        tag = "resume " if call == Call.ADD_CHUNKED_REQ else ""
        out.append(f"{tag}{rid}: {dec}/{state}")
    return ", ".join(out) or "-"


def md_table(
    headers: Sequence[str], rows: Iterable[Sequence[object]], right: Sequence[int] = ()
) -> str:
    def cell(v: object) -> str:
        return num(v).replace("|", "\\|").replace("\n", " ")

    align = ["---:" if i in right else "---" for i in range(len(headers))]
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)
