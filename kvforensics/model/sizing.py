"""How many tokens a piece is: page arithmetic, truncation, resumed pieces and alignment.

The one home of these rules. The adder sizes its pieces with them; the rounds rebuild
sizes the silent rounds it infers, and inverts them (which start gives a piece of this
size), with the same functions, so the two can never drift apart.
"""

from __future__ import annotations

from typing import NamedTuple


def ceil_page(n: int, page: int) -> int:
    return -(-n // page) * page


def floor_page(n: int, page: int) -> int:
    return n // page * page


def pages_for(start: int, end: int, page: int) -> int:
    """Slots a piece [start, end) allocates: a prefix's partial last page is reused."""
    return (-(-end // page) - -(-start // page)) * page


def batch_ask(pieces: list[tuple[str, int, int]], page: int, page_per_request: bool) -> int:
    """Slots the allocator wants free for a batch of pieces ``(owner, start, end)``: their
    new whole pages, or (``page_per_request``: the SWA allocator of 0.5.9 and 0.5.10) their
    tokens plus a page per piece, an estimate that can exceed the pages."""
    if page_per_request:
        return sum(e - s for _, s, e in pieces) + len(pieces) * page
    return sum(pages_for(s, e, page) for _, s, e in pieces)


def align_end(start: int, end: int, align: int) -> int:
    """A non-last piece's end floored to the checkpoint align, unless that reaches the start
    (then the piece keeps its unaligned end). ``align`` 0: no alignment."""
    if align:
        aligned = end // align * align
        if aligned > start:
            return aligned
    return end


def memory_need(remaining: int, max_new: int, page_charge: int) -> int:
    """What the memory check asks for: the whole remaining prompt, its first tokens and
    the per-request page (``page_charge`` 0 when the profile charges none)."""
    return remaining + max_new + page_charge


def tail_need(tail: int, page: int, max_new: int) -> int:
    """What promising a truncated request's tail to later rounds costs: its pages and its
    first token (the fix charges this to ``rem_total_token_offset``)."""
    return ceil_page(tail, page) + max_new


class Sized(NamedTuple):
    """A piece as the adder sized it. ``unaligned_end`` is where it would end without the
    checkpoint alignment; ``forced`` says memory was gone and the chunk budget was taken."""

    end: int
    unaligned_end: int
    truncated: bool
    forced: bool = False


def resumed_piece(start: int, seq_len: int, rem_chunk: int, rem_total: int, align: int) -> Sized:
    """``add_chunked_req``: ``min(rem_chunk, rem_total)`` tokens, or the whole chunk budget
    when that is <= 0 (the forced branch); a non-last piece's end is aligned."""
    n = min(rem_chunk, rem_total)
    forced = n <= 0
    if forced:
        n = rem_chunk
    if seq_len - start > n:
        raw = start + n
        return Sized(align_end(start, raw, align), raw, True, forced)
    return Sized(seq_len, seq_len, False, forced)


def truncated_end(
    prefix: int,
    rem_chunk: int,
    page: int,
    truncation_align: int,
    align: int,
    *,
    page_floor: bool = True,
) -> Sized:
    """``add_one_req`` cutting a request short: the chunk budget in whole pages (floored to
    ``truncation_align_size`` when set), the end floored to a page (``page_floor``: the
    releases that do), then aligned to the checkpoint align."""
    n = floor_page(rem_chunk, page)
    if truncation_align:
        n = n // truncation_align * truncation_align
    raw = floor_page(prefix + n, page) if page_floor else prefix + n
    return Sized(align_end(prefix, raw, align), raw, True)


def resumed_end_for(start: int, spent: int, page: int, align: int) -> int | None:
    """The end of a non-last resumed piece from ``start`` whose page-ceiled length is
    ``spent`` (what the chunk budget shows it took). None when no such piece exists, so
    it must have started elsewhere."""
    for n in range(spent, max(spent - page, 0), -1):  # raw lengths with that ceiling
        end = align_end(start, start + n, align)
        if ceil_page(end - start, page) == spent:
            return end
    return None


def resumed_baselines_for(
    start: int, seq_len: int, rem_chunk: int, align: int, ends: tuple[int, int], above: int,
    pool: int,
) -> tuple[int, int] | None:
    """The inverse of ``resumed_piece``: the baselines in (``above``, ``pool``] from which
    the resumed piece from ``start`` ends in ``ends`` = [lo, hi], as (least, most); None
    when none does. The end never falls as the baseline grows (past the forced branch at
    <= 0), so both are bisections."""
    lo, hi = ends
    low = max(above + 1, 1)
    if pool < low or resumed_piece(start, seq_len, rem_chunk, pool, align).end < lo:
        return None
    least = _least_baseline_to(start, seq_len, rem_chunk, align, lo, (low, pool))
    if resumed_piece(start, seq_len, rem_chunk, least, align).end > hi:
        return None
    most = _least_baseline_to(start, seq_len, rem_chunk, align, hi + 1, (least, pool + 1)) - 1
    return least, most


def _least_baseline_to(
    start: int, seq_len: int, rem_chunk: int, align: int, target: int, within: tuple[int, int]
) -> int:
    """The least baseline in [low, high) whose resumed piece ends at or past ``target``;
    ``high`` when none does (``high`` itself is never sized)."""
    low, high = within
    while low < high:
        mid = (low + high) // 2
        if resumed_piece(start, seq_len, rem_chunk, mid, align).end >= target:
            high = mid
        else:
            low = mid + 1
    return low
