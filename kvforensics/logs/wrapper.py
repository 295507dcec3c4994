"""The text a file's lines carry in front of SGLang's own, learned from the file itself.

Production logs arrive wrapped: docker compose's service column, a container runtime's
time stamp, Python logging re-logging SGLang's lines, kubectl's pod prefix, journald,
slurm's task label, or a paste's quote marker and indent. The first lines of a file
show where its known messages start; the text in front of them is explained by the
forms of ``formats/wrapper.toml``, outermost first, and the forms most lines share are
the file's wrapper. It is stripped from every line of that file, so that the catalogue
reads the lines as SGLang wrote them (a wrapped traceback's lines become plain
continuation lines again). A file whose messages start its lines learns nothing, and
its chunks pay nothing.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import cached_property

import polars as pl

from kvforensics.logs.forms import Catalogue, WrapperForm, is_anchored, split_flags

#: SGLang's own prefix anywhere in a line: a date and time, a time of day or rank tags
SGLANG_BRACKET = (
    r"\[(?:[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}|[0-9]{2}:[0-9]{2}:[0-9]{2}"
    r"|(?:DP|PP|ATTN_CP|MOE_DP|TP|EP)[0-9]+)[^\]\n]*\] "
)
#: text no form explains, in front of SGLang's bracket: kept from the bracket on
OWN_TEXT = WrapperForm("own_text", "text of its own", f"^.*?(?P<keep>{SGLANG_BRACKET})")
MAX_LAYERS = 6


@dataclass(frozen=True)
class Wrapper:
    """A file's wrapper: its forms, outermost first, each optional on a line."""

    forms: tuple[WrapperForm, ...]
    lines: int = 0  # message lines of the sampled head that carried it

    def says(self) -> str:
        return "lines wrapped by " + ", then ".join(f.says for f in self.forms)

    @cached_property
    def regex(self) -> str:
        parts = []
        for i, f in enumerate(self.forms):
            body = split_flags(f.regex)[1].removeprefix("^")
            for g, short in (("time", "t"), ("frac", "f"), ("clock", "c")):
                body = body.replace(f"(?P<{g}>", f"(?P<{short}{i}>")
            parts.append(f"(?:{body})?")
        return "^" + "".join(parts)

    @cached_property
    def replacement(self) -> str:
        return "${keep}" if any("(?P<keep>" in f.regex for f in self.forms) else ""

    @cached_property
    def python_regex(self) -> str:
        """The same without its groups, for Python's engine (where chunks are cut)."""
        return re.sub(r"\(\?P<[A-Za-z_][A-Za-z0-9_]*>", "(?:", self.regex)

    def strip(self, lines: pl.Series) -> tuple[pl.Series, pl.DataFrame | None]:
        """Lines without the wrapper, and the wrapper's time of each line (columns
        `_wtime`, `_wms`, `_wclock`) when its forms print one."""
        timed = [i for i, f in enumerate(self.forms) if re.search(r"\(\?P<(time|clock)>", f.regex)]
        times = self._times(lines, timed) if timed else None
        return lines.str.replace(self.regex, self.replacement), times

    def _times(self, lines: pl.Series, timed: list[int]) -> pl.DataFrame:
        g = lines.str.extract_groups(self.regex)
        stamps, has_ms, clocks = [], [], []
        for i in timed:
            f = self.forms[i]
            if f"t{i}" in g.struct.fields:
                raw = g.struct.field(f"t{i}")
                frac = g.struct.field(f"f{i}") if f"f{i}" in g.struct.fields else None
                t = raw.str.to_datetime(f.time_format, time_unit="ms", strict=False)
                if frac is not None:
                    ms = frac.str.slice(0, 3).str.pad_end(3, "0").cast(pl.Int64, strict=False)
                    # (polars takes a Series as a duration's part; its stub says Expr)
                    ms_part = ms.fill_null(0)
                    t = t + pl.select(pl.duration(milliseconds=ms_part)).to_series()  # type: ignore[arg-type]
                    has_ms.append(frac.is_not_null() & t.is_not_null())
                stamps.append(t)
            if f"c{i}" in g.struct.fields:
                clocks.append(g.struct.field(f"c{i}").str.to_time("%H:%M:%S", strict=False))
        out = pl.DataFrame(
            {
                "_wtime": pl.select(pl.coalesce(stamps)).to_series()
                if stamps
                else pl.Series([None] * len(lines), dtype=pl.Datetime("ms")),
                "_wms": pl.select(pl.any_horizontal(has_ms)).to_series()
                if has_ms
                else pl.Series([False] * len(lines)),
            }
        )
        clock = pl.select(pl.coalesce([*clocks, out["_wtime"].dt.time()])).to_series()
        return out.with_columns(clock.alias("_wclock"))


def _markers(cat: Catalogue) -> list[str]:
    """Where a known message starts: SGLang's bracket, or a catalogue message."""
    out = [SGLANG_BRACKET]
    for f in cat.formats:
        if not is_anchored(f.regex):  # found anywhere in a line by design
            continue
        flags, body = split_flags(f.line_regex or f.regex)
        body = body.removeprefix("^")
        if f.line_regex:  # `(?P<__m>)` and the optional prefix in front of the message
            body = body.removeprefix("(?P<__m>)").removeprefix(cat.prefix.optional)
            body = body.removeprefix(cat.prefix.required)
        # where the message itself starts: an indent in front is the wrapper's
        out.append(flags + body.removeprefix("[ \\t]*"))
    return out


def _peel(
    head: str, forms: tuple[tuple[WrapperForm, re.Pattern[str]], ...]
) -> tuple[tuple[WrapperForm, ...], str]:
    """The forms that explain `head`, outermost first, and the text none explains."""
    seq: list[WrapperForm] = []
    while head and len(seq) < MAX_LAYERS:
        for f, rx in forms:
            m = rx.match(head)
            if m and m.end() > 0:
                seq.append(f)
                head = head[m.end() :]
                break
        else:
            break
    return tuple(seq), head


def learn(lines: list[str], cat: Catalogue) -> Wrapper | None:
    """The wrapper most of these lines' known messages sit behind, or None when most of
    them start their line (or none is known)."""
    if not lines or not cat.learns_wrappers:
        return None
    s = pl.Series("text", lines, dtype=pl.String)
    pos = pl.select(
        # a line SGLang's own prefix starts is read as it is, whatever follows
        pl.when(s.str.contains(cat.prefix.regex))
        .then(pl.lit(0, dtype=pl.UInt32))
        .otherwise(pl.min_horizontal([s.str.find(rx) for rx in _markers(cat)]))
    ).to_series()
    at_start = int((pos == 0).sum())
    # (text in front of the message, whether the message is SGLang's bracketed prefix)
    bracket = re.compile(SGLANG_BRACKET)
    heads = [
        (b[:p].decode("utf-8", "replace"), bool(bracket.match(b[p:].decode("utf-8", "replace"))))
        for t, p in zip(lines, pos.to_list(), strict=True)
        if p and (b := t.encode())
    ]
    if len(heads) <= at_start:
        return None
    forms = tuple((f, re.compile(f.regex)) for f in cat.wrappers)
    seqs: Counter[tuple[int, ...]] = Counter()
    unexplained = 0
    for h, at_bracket in heads:
        seq, rest = _peel(h, forms)
        seqs[tuple(cat.wrappers.index(f) for f in seq)] += 1
        # only SGLang's own prefix can be found behind text no form explains
        unexplained += bool(rest.strip()) and at_bracket
    best = max(seqs.items(), key=lambda kv: (kv[1], len(kv[0])))[0]
    layers = [cat.wrappers[i] for i in best]
    if 2 * unexplained > len(heads):
        layers.append(OWN_TEXT)
    if not layers:
        return None
    return Wrapper(tuple(layers), len(heads))
