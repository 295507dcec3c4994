"""``page_granularity`` with the batch's own pieces: what the allocator asked for against
what was free, beside the message's arithmetic (``N <= free``).

The allocator wants whole pages (``sizing.batch_ask``), and the SWA allocator of 0.5.9 and
0.5.10 the tokens plus a page per request. On a single pool whose free count is whole
pages a memory check that passed always leaves room for the pages (``docs/causes.md``, "Page
granularity"), so a message that shows ``N <= free`` there is explained only where the
ask, counted from the rebuilt pieces, is above the free slots.
"""

from __future__ import annotations

from kvforensics.causes.cause import Cause
from kvforensics.model.profiles import FORK
from kvforensics.model.sizing import batch_ask


def page_ask(rr) -> dict | None:
    """The out-of-memory batch's pieces and what the allocator asked for them; None when
    the rebuild has no out-of-memory round or no pieces in it."""
    rb = rr.rebuild
    rnd = next((r for r in rb.rounds if r.oom is not None), None)
    if rnd is None or not rnd.pieces:
        return None
    page = rb.cfg.page_size
    pieces = [(p.rid, p.start, p.end) for p in rnd.pieces]
    profile = rr.profile.profile if rr.profile is not None else FORK
    estimate = profile.swa_page_per_request and rb.oom.swa_available is not None
    return {
        "pieces": [[r, s, e] for r, s, e in pieces],
        "pages_needed": batch_ask(pieces, page, False),
        "allocator_asks": batch_ask(pieces, page, estimate),
        "page_per_request": estimate,
        "profile": profile.name,
    }


def with_pieces(cause: Cause, ask: dict | None, page: int) -> Cause:
    """``cause`` (page_granularity from the message's numbers) checked against the pieces."""
    if ask is None or cause.held is not True:
        return cause
    free = cause.figures["free"]
    figures = {**cause.figures, **ask, "free_pages": free // page}
    asks, needed = ask["allocator_asks"], ask["pages_needed"]
    n = len(ask["pieces"])
    how = (
        f"{cause.figures['requested']} tokens + a page for each of {n} piece(s) "
        f"(the SWA allocator of {ask['profile']})"
        if ask["page_per_request"]
        else f"{n} piece(s) in whole pages of {page}"
    )
    line = f"the allocator asked {asks} slots for {how}, {needed} in whole pages; {free} free"
    if asks <= free:
        summary = f"the message shows N <= free, but {line}: the pieces would have fit"
        return Cause(cause.id, False, summary, [*cause.evidence, line], cause.round, figures)
    story = [*cause.story, f"{line[0].upper()}{line[1:]}."]
    return Cause(cause.id, True, cause.summary, [*cause.evidence, line], cause.round, figures,
                 story)  # fmt: skip
