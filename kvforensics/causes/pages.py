"""``page_granularity`` with the batch's own pieces: what the allocator asked for against
what was free, beside the message's arithmetic (``N <= free``).

The allocator wants whole pages (``sizing.batch_ask``), and the SWA allocator of 0.5.9 and
0.5.10 the tokens plus a page per request. On a single pool whose free count is whole
pages a memory check that passed always leaves room for the pages (``docs/causes.md``, "Page
granularity"), so a message that shows ``N <= free`` there is explained only where the
ask, counted from the rebuilt pieces, is above the free slots.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvforensics.causes.cause import Cause
from kvforensics.causes.pools import PoolFigures
from kvforensics.model.profiles import FORK
from kvforensics.model.sizing import batch_ask

if TYPE_CHECKING:
    from kvforensics.causes.replayed import Replayed


@dataclass(frozen=True, slots=True, kw_only=True)
class PageAsk:
    """The out-of-memory batch's pieces and what the allocator asked for them."""

    pieces: tuple[tuple[str, int, int], ...]  # (rid, start, end)
    pages_needed: int
    allocator_asks: int
    #: the SWA allocator's page per request is counted (``allocator_asks``)
    page_per_request: bool
    profile: str

    def as_dict(self) -> dict[str, object]:
        return {
            "pieces": [[r, s, e] for r, s, e in self.pieces],
            "pages_needed": self.pages_needed,
            "allocator_asks": self.allocator_asks,
            "page_per_request": self.page_per_request,
            "profile": self.profile,
        }


@dataclass(frozen=True, slots=True)
class PageFigures:
    """``page_granularity``'s figures once checked against the pieces."""

    pool: PoolFigures
    ask: PageAsk
    free_pages: int

    def as_dict(self) -> dict[str, object]:
        return {**self.pool.as_dict(), **self.ask.as_dict(), "free_pages": self.free_pages}


def page_ask(rr: Replayed) -> PageAsk | None:
    """The out-of-memory batch's pieces and what the allocator asked for them; None when
    the rebuild has no out-of-memory round or no pieces in it."""
    rb = rr.rebuild
    rnd = next((r for r in rb.rounds if r.oom is not None), None)
    if rnd is None or not rnd.pieces or rb.oom is None:
        return None
    page = rb.cfg.page_size
    pieces = [(p.rid, p.start, p.end) for p in rnd.pieces]
    profile = rr.profile.profile if rr.profile is not None else FORK
    estimate = profile.swa_page_per_request and rb.oom.swa_available is not None
    return PageAsk(
        pieces=tuple(pieces),
        pages_needed=batch_ask(pieces, page, False),
        allocator_asks=batch_ask(pieces, page, estimate),
        page_per_request=estimate,
        profile=profile.name,
    )


def with_pieces(cause: Cause, ask: PageAsk | None, page: int) -> Cause:
    """``cause`` (page_granularity from the message's numbers) checked against the pieces."""
    pool = cause.figures
    if ask is None or cause.held is not True or not isinstance(pool, PoolFigures):
        return cause
    free = pool.free
    if free is None:  # a held page_granularity always has its free count
        return cause
    figures = PageFigures(pool, ask, free // page)
    asks, needed = ask.allocator_asks, ask.pages_needed
    n = len(ask.pieces)
    how = (
        f"{pool.requested} tokens + a page for each of {n} piece(s) "
        f"(the SWA allocator of {ask.profile})"
        if ask.page_per_request
        else f"{n} piece(s) in whole pages of {page}"
    )
    line = f"the allocator asked {asks} slots for {how}, {needed} in whole pages; {free} free"
    if asks <= free:
        summary = f"the message shows N <= free, but {line}: the pieces would have fit"
        return Cause(cause.id, False, summary, [*cause.evidence, line], cause.round, figures)
    story = [*cause.story, f"{line[0].upper()}{line[1:]}."]
    return Cause(cause.id, True, cause.summary, [*cause.evidence, line], cause.round, figures,
                 story)  # fmt: skip
