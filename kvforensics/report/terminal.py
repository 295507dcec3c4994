"""Terminal layout that fits its width without cutting a value.

A table is printed as a table when the terminal is wide enough for every word of every
cell (and at least `NARROW_BELOW` columns); otherwise each row becomes a key/value block
with the row's key columns as its heading. Prose wraps with a hanging indent. Previews of
log lines are cut at a word boundary, never inside a number."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from rich.console import Console, ConsoleOptions, RenderResult
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from kvforensics.clip import clip, safe_cut

#: below this many columns tables switch to key/value blocks
NARROW_BELOW = 100


@dataclass
class FitTable:
    """Rows with a wide (table) and a narrow (key/value block) rendering, chosen when
    printed from the width available then."""

    headers: Sequence[str]
    rows: list[Sequence[str]] = field(default_factory=list)
    title: str | None = None
    caption: str | None = None
    key: int = 1  # leading columns that name a row (the block's heading when narrow)
    right: Sequence[int] = ()
    narrow_below: int = NARROW_BELOW
    show_lines: bool = False
    styles: list[str | None] = field(default_factory=list)

    def add_row(self, *cells: object, style: str | None = None) -> None:
        self.rows.append([_cell(c) for c in cells])
        self.styles.append(style)

    def wide(self) -> Table:
        # Cells, title and caption hold values from the input (rids, paths): as Text, rich
        # neither parses them as markup nor runs its highlighter's regexes over them.
        t = Table(
            title=_plain(self.title), caption=_plain(self.caption), show_lines=self.show_lines
        )
        for i, h in enumerate(self.headers):
            t.add_column(h, justify="right" if i in self.right else "left", overflow="fold")
        for r, style in zip(self.rows, self.styles, strict=True):
            t.add_row(*(Text(c) for c in r), style=style)
        return t

    def narrow(self, width: int) -> list[Text]:
        out = [Text(self.title, style="bold")] if self.title else []
        keyw = max((len(h) for h in self.headers[self.key :]), default=0)
        room = max(20, width - keyw - 4)
        for r, style in zip(self.rows, self.styles, strict=True):
            pairs = zip(self.headers, r[: self.key], strict=False)
            head = "  ".join(f"{h} {v}" if v else h for h, v in pairs)
            out.append(Text(head, style=f"bold {style or ''}".strip()))
            for h, v in zip(self.headers[self.key :], r[self.key :], strict=False):
                if v in ("", "-"):
                    continue  # nothing to say: a block lists only what the row has
                lines = [
                    w
                    for part in str(v).splitlines() or [""]
                    for w in textwrap.wrap(part, room, break_long_words=False) or [""]
                ]
                for i, line in enumerate(lines):
                    out.append(Text(f"  {h if i == 0 else '':<{keyw}}  {line}"))
        if self.caption:
            out.append(Text(self.caption, style="dim"))
        return out

    def fits(self, console: Console, width: int) -> bool:
        """Wide when nothing needs wrapping, or when the terminal is wide and no word has
        to be broken."""
        # measured unconstrained: a measurement is clamped to the width it is given
        need = Measurement.get(console, console.options.update(width=10_000), self.wide())
        return need.maximum <= width or (width >= self.narrow_below and need.minimum <= width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        if self.fits(console, width):
            yield self.wide()
        else:
            yield from self.narrow(width)


#: a word (no spaces) longer than this is a value no one reads whole on a terminal, such
#: as a 100,000-character rid: it keeps its head and tail (JSON output keeps all of it)
MAX_WORD = 72
_LONG_WORD = re.compile(rf"\S{{{MAX_WORD + 1},}}")


def _middle_cut(word: str) -> str:
    """A long word's head and tail, the cuts outside any number in it."""
    head = safe_cut(word, 30)
    tail = safe_cut(word, len(word) - 16, forward=True)
    if head == 0 or tail >= len(word) or tail <= head:
        return word  # one long number, or numbers all through: shown whole
    return f"{word[:head]}…({tail - head} more)…{word[tail:]}"


def shorten_words(text: str) -> str:
    """``text`` with every word over ``MAX_WORD`` characters cut in its middle, never
    inside a number."""
    if len(text) <= MAX_WORD:
        return text
    return _LONG_WORD.sub(lambda m: _middle_cut(m[0]), text)


def shorten_values(text: str, values: Iterable[str]) -> str:
    """``text`` with each of ``values`` over ``MAX_WORD`` characters (rids) cut the same
    way wherever it stands, whatever punctuation follows it; then any other long word."""
    for v in sorted((v for v in set(values) if len(v) > MAX_WORD), key=len, reverse=True):
        text = text.replace(v, _middle_cut(v))
    return shorten_words(text)


def _cell(v: object) -> str:
    return "-" if v is None else shorten_words(str(v))


def _plain(text: str | None) -> Text | None:
    return None if text is None else Text(shorten_words(text))


def literal(value: object) -> str:
    """A value from the input (a rid, a path, a line) as it goes into a line with markup:
    long words cut as ``shorten_words`` does, then escaped, so a ``[`` in a rid is text.
    Print such lines with ``highlight=False`` (the shared consoles do)."""
    return escape(shorten_words(str(value)))


def paragraph(text: str, width: int, indent: int = 2, hang: int = 4) -> str:
    """``text`` wrapped to ``width`` with continuation lines indented further than the
    first; ranges and numbers are never broken across lines."""
    return textwrap.fill(
        shorten_words(text),
        width=max(20, width),
        initial_indent=" " * indent,
        subsequent_indent=" " * hang,
        break_long_words=False,
        break_on_hyphens=False,
    )


def preview(text: str, limit: int) -> str:
    """At most about ``limit`` characters of a log line, cut at a space (with "…"), never
    inside a number."""
    return clip(shorten_words(str(text)), limit)


@dataclass
class Hanging:
    """A paragraph whose continuation lines start under its first word, after ``lead``."""

    lead: str
    text: str
    indent: int = 0

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        pad = " " * self.indent
        yield Text(
            textwrap.fill(
                shorten_words(self.text),
                width=max(20, options.max_width),
                initial_indent=pad + self.lead,
                subsequent_indent=pad + " " * len(self.lead),
                break_long_words=False,
                break_on_hyphens=False,
            )
        )
