"""Which SGLang release wrote a log, as far as its lines tell (docs/sglang-releases.md,
"Telling the release from a log").

Three kinds of evidence, strongest first: the fork's own adder lines (a build with the
fork's instrumentation, whatever release it started from; sglang-jax's code paths say
the log is not SGLang's at all); a version string
(``sglang==0.5.16``, ``sglang: 0.5.16`` as ``check_env`` prints it, an image tag
``sglang:v0.5.16``, a ``sglang-0.5.16.dist-info`` path); the form of the ``Prefill batch``
line, whose keys changed between releases. Only the first ``SCAN_BYTES`` of each file are
read: the evidence is in the first lines, and a long log is read whole later anyway.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvforensics.logs.source import iter_bytes

SCAN_BYTES = 16 << 20
Release = tuple[int, int, int]

#: searched for in the lines that hold "sglang" in any case (ASCII: a version string is)
_VERSION = re.compile(r"\bsglang(?:==|:\s*v?|\s+v?|-|/v)(\d+)\.(\d+)\.(\d+)\b", re.I | re.A)
_FORK = b"PrefillAdder.add_one_req"
#: code paths of sglang-jax, another project with SGLang-like lines and its own releases
_JAX = (b"sgl_jax", b"sglang-jax")
#: searched for in the whole head at once (``.`` stops at the end of the line)
_BATCH = re.compile(rb"Prefill batch(?: \[\d+\])?([.,]) (.*)")


@dataclass(frozen=True, slots=True)
class ReleaseEvidence:
    """Releases ``lo`` to ``hi`` (either end None: open) fit the log; ``fork``: the
    fork's own lines. ``where`` is ``file:line`` of the deciding line."""

    how: str  # "fork" | "version" | "lines" | "other" (not SGLang's lines)
    lo: Release | None
    hi: Release | None
    reason: str
    where: str
    line: str

    def span(self) -> str:
        if self.how in ("fork", "other"):
            return "no SGLang release"
        lo, hi = (".".join(map(str, r)) if r else None for r in (self.lo, self.hi))
        if lo == hi:
            return lo or "?"
        if lo is None:
            return f"{hi} or earlier" if hi else "any release"
        return f"{lo} or later" if hi is None else f"{lo} to {hi}"


def _v(minor: int) -> Release:
    return (0, 5, minor)


def batch_line_releases(sep: str, pairs: str) -> tuple[Release | None, Release | None, str]:
    """The releases whose ``Prefill batch`` line has this form (read from each release's
    ``report_prefill_stats``). Returns (lo, hi, why); (None, None, "") when the form says
    nothing."""
    keys = [p.split(": ", 1)[0].strip() for p in pairs.split(", ") if p.strip()]
    has = set(keys).__contains__
    graph = next((i for i, k in enumerate(keys) if k.endswith(" graph")), None)
    thru = keys.index("input throughput (token/s)") if has("input throughput (token/s)") else None
    if sep == ".":
        return None, _v(8), "'Prefill batch.' (0.5.9 on print 'Prefill batch,')"
    if has("#replay-token"):
        return _v(21), None, "#replay-token (0.5.21 on)"
    if has("#optimistic-req"):
        return _v(16), None, "#optimistic-req (0.5.16 on)"
    if has("#bootstrap-req") and has("#inflight-req"):
        return _v(12), _v(15), "#bootstrap-req without #optimistic-req (0.5.12 to 0.5.15)"
    if has("#prealloc-req") and has("#pending-token"):
        return _v(11), _v(11), "#prealloc-req with #pending-token (0.5.11)"
    if graph is None or thru is None:
        return None, None, ""  # cut, or a form no release between 0.5.9 and 0.5.23 prints
    if has("#pending-token"):
        return _v(11), None, "#pending-token (0.5.11 on)"
    if thru < graph:
        return None, _v(9), "input throughput before the graph flag (0.5.9 and before)"
    return _v(10), _v(10), "the graph flag before input throughput, no #pending-token (0.5.10)"


def _intersect(a: tuple[Any, ...], b: tuple[Any, ...]) -> tuple[Any, ...]:
    lo = max((x for x in (a[0], b[0]) if x), default=None)
    hi = min((x for x in (a[1], b[1]) if x), default=None)
    return lo, hi


def detect_release(paths: list[Path]) -> tuple[ReleaseEvidence | None, list[str]]:
    """The strongest evidence of the release in ``paths``, and notes (lines that
    disagree). None when nothing tells."""
    version = fork = other = None
    forms: list[ReleaseEvidence] = []
    for path in paths:
        head = _Head(path)
        raw = head.raw
        if fork is None and (i := raw.find(_FORK)) >= 0:
            fork = ReleaseEvidence("fork", None, None, "the fork's adder lines", *head.at(i))
        jax = [i for i in (raw.find(j) for j in _JAX) if i >= 0]
        if other is None and jax:
            other = ReleaseEvidence("other", None, None, "sglang-jax's code paths",
                                    *head.at(min(jax)))  # fmt: skip
        if version is None and (got := head.version()):
            vm, where, line = got
            major, minor, patch = (int(x) for x in vm.groups())  # ``_VERSION``'s three
            r = (major, minor, patch)
            version = ReleaseEvidence("version", r, r, f"version string {vm.group(0)!r}",
                                      where, line)  # fmt: skip
        for m in _BATCH.finditer(raw):
            sep, pairs = (g.decode("utf-8", "replace") for g in m.groups())
            lo, hi, why = batch_line_releases(sep, pairs)
            if why:
                forms.append(ReleaseEvidence("lines", lo, hi, why, *head.at(m.start())))
    notes: list[str] = []
    form = _combine(forms, notes)
    return fork or other or version or form, notes


def _combine(forms: list[ReleaseEvidence], notes: list[str]) -> ReleaseEvidence | None:
    """The narrowest range all the batch lines allow (the first line of each form is
    the one cited); None with a note when they disagree."""
    if not forms:
        return None
    span: tuple[Any, ...] = (None, None)
    best = forms[0]
    for f in forms:
        new = _intersect(span, (f.lo, f.hi))
        if new[0] and new[1] and new[0] > new[1]:
            notes.append(f"the Prefill batch lines disagree on the release: {best.where} "
                         f"({best.reason}) vs {f.where} ({f.reason})")  # fmt: skip
            return None
        if new != span:
            best, span = f, new
    reasons = sorted({f.reason for f in forms if (f.lo, f.hi) != (None, None)})
    return ReleaseEvidence("lines", span[0], span[1], "; ".join(reasons), best.where, best.line)


class _Head:
    """The whole lines of the first ``SCAN_BYTES`` of a file, searched at once rather
    than line by line (a cut last line is left out: its form is not whole)."""

    def __init__(self, path: Path) -> None:
        buf, read = bytearray(), 0
        for block in iter_bytes(path, []):
            buf += block
            read += len(block)
            if read >= SCAN_BYTES:
                break
        del buf[buf.rfind(b"\n") + 1 :]
        self.path, self.raw = path, bytes(buf)
        self._pos, self._n = 0, 1  # line number at ``_pos``, for searches made in order

    def at(self, i: int) -> tuple[str, str]:
        """``file:line`` of the line holding byte ``i``, and that line's text, stripped."""
        raw = self.raw
        if i >= self._pos:
            self._n += raw.count(b"\n", self._pos, i)
            self._pos, n = i, self._n
        else:
            n = 1 + raw.count(b"\n", 0, i)
        start, end = raw.rfind(b"\n", 0, i) + 1, raw.find(b"\n", i)
        return f"{self.path}:{n}", raw[start:end].decode("utf-8", "replace").strip()

    def version(self) -> tuple[re.Match[str], str, str] | None:
        """The first version string, where, and its line (of the lines naming sglang)."""
        low = self.raw.lower()  # ASCII only: the offsets stay the raw bytes'
        i = low.find(b"sglang")
        while i >= 0:
            where, line = self.at(i)
            if m := _VERSION.search(line):
                return m, where, line
            i = low.find(b"sglang", low.find(b"\n", i))
        return None
