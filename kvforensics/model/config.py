"""Sizes of the prefill node. Every size is configuration; nothing here is a constant of the model."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal, get_args

from kvforensics.model import sizing

#: No node holds more tokens than this (a 2**40-token pool is ~1000x today's largest):
#: a larger size is a misread number, and the model would loop over it for ever.
MAX_TOKENS = 2**40

SIZE_FIELDS = (
    "page_size",
    "chunked_prefill_size",
    "max_prefill_tokens",
    "pool_size",
    "align_size",
    "truncation_align_size",
    "max_new_tokens",
)
#: which availability line an out-of-memory prints (``Config.cache_kind``)
CacheKind = Literal["hybrid", "radix"]
_POSITIVE = ("page_size", "chunked_prefill_size", "max_prefill_tokens", "pool_size")


def size_problems(sizes: dict[str, object]) -> list[tuple[str, str]]:
    """What is wrong with a node's sizes, as (field, why) pairs; empty when they can run.

    The one home for the relations: positive sizes, bounded by ``MAX_TOKENS``, the
    alignment a multiple of the page, and a chunk of at least one page (a smaller chunk
    can never admit a page, so the adder would make no progress)."""
    out: list[tuple[str, str]] = []
    for name, v in sizes.items():
        if isinstance(v, bool) or not isinstance(v, int):
            out.append((name, "must be a whole number of tokens"))
        elif v <= 0 and name in _POSITIVE:
            out.append((name, "must be positive"))
        elif v < 0:
            out.append((name, "must be >= 0"))
        elif v > MAX_TOKENS:
            out.append((name, f"is beyond any node (at most 2**40 = {MAX_TOKENS})"))
    if out:
        return out
    # every size is a whole number now
    ints = {n: v for n, v in sizes.items() if isinstance(v, int)}
    page = ints.get("page_size")
    # The fork only asks `align % page == 0`, so every aligned end is a page boundary.
    align = ints.get("align_size")
    if page and align and align % page:
        out.append(("align_size", f"must be a multiple of page_size {page}"))
    chunk = ints.get("chunked_prefill_size")
    if page and chunk is not None and chunk < page:
        out.append(("chunked_prefill_size", f"must be at least one page ({page})"))
    return out


@dataclass(frozen=True, slots=True)
class Config:
    """What a prefill node was started with (`server_args` and the fork's startup lines).

    ``align_size`` is the fork's checkpoint end alignment (FlashKDA: 256); a policy decides
    whether it applies. ``truncation_align_size`` is SGLang's own knob that floors the
    length of a newly truncated piece (flashinfer deterministic inference); 0 means off.
    """

    page_size: int
    chunked_prefill_size: int
    max_prefill_tokens: int
    pool_size: int
    align_size: int = 0
    truncation_align_size: int = 0
    max_new_tokens: int = 1
    #: which availability line an out-of-memory prints: "hybrid" (full_available_size=...)
    #: for the hybrid-SSM cache of the incident, "radix" (available_size=...) otherwise.
    cache_kind: CacheKind = "hybrid"
    #: the SWA pool of a hybrid sliding-window model (``swa_max_total_num_tokens``), None
    #: without one: ``PagePool`` needs room in it too, the adder's budget does not see it
    swa_pool_size: int | None = None

    def __post_init__(self) -> None:
        problems = size_problems({n: getattr(self, n) for n in SIZE_FIELDS})
        if problems:
            name, why = problems[0]
            raise ValueError(f"{name} {getattr(self, name)} {why}")
        if self.cache_kind not in get_args(CacheKind):
            raise ValueError(f"cache_kind must be 'hybrid' or 'radix', got {self.cache_kind!r}")

    def with_(self, **changes: Any) -> Config:
        return replace(self, **changes)

    # Page arithmetic at this node's page size (the rules live in ``sizing``).
    def ceil_page(self, n: int) -> int:
        return sizing.ceil_page(n, self.page_size)

    def floor_page(self, n: int) -> int:
        return sizing.floor_page(n, self.page_size)

    def pages_for(self, start: int, end: int) -> int:
        """Slots a piece [start, end) allocates: a prefix's partial last page is reused."""
        return sizing.pages_for(start, end, self.page_size)
