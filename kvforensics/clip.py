"""Shortening a value for display without cutting a number in two.

Every place that shows part of a log line or of a value (previews, error messages, long
words on a terminal) cuts here: at a space when there is one, else between characters
that are not both part of a number, and always with a mark saying that something was
left out.
"""

from __future__ import annotations

#: characters a number (or a time, a date) is written with; a cut never falls between
#: two of them
_NUMBER = frozenset("0123456789.:-")
#: a number longer than this is cut anyway, and the mark says so: shown whole, a damaged
#: log's 65,536-digit "number" would flood the terminal (and stall rich's highlighter)
LONGEST_NUMBER = 64


def safe_cut(text: str, i: int, *, forward: bool = False) -> int:
    """The nearest index to ``i`` (before it, or after it with ``forward``) that does not
    fall inside a number."""
    i = max(0, min(i, len(text)))
    step = 1 if forward else -1
    while 0 < i < len(text) and text[i - 1] in _NUMBER and text[i] in _NUMBER:
        i += step
    return i


def clip(text: str, limit: int) -> str:
    """At most about ``limit`` characters of ``text``: cut at the last space before the
    limit, marked " …"; where that would drop more than half of what fits (a word longer
    than that), the word is cut outside its numbers and marked with how much was left
    out."""
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit + 1)
    if cut >= limit // 2 and text[:cut].strip():
        return text[:cut].rstrip() + " …"
    cut = safe_cut(text, limit)
    if cut == 0:  # one number longer than the limit: shown whole unless it is huge
        cut = safe_cut(text, limit, forward=True)
        if cut > max(limit, LONGEST_NUMBER):
            return f"{text[:limit]}…(cut inside a number of {cut} characters; " \
                f"{len(text) - limit} more characters)"
        if cut >= len(text):
            return text
    return f"{text[:cut]}…({len(text) - cut} more characters)"
