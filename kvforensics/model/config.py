"""Sizes of the prefill node. Every size is configuration; nothing here is a constant of the model."""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvforensics.model import sizing


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
    cache_kind: str = "hybrid"

    def __post_init__(self) -> None:
        for name in ("page_size", "chunked_prefill_size", "max_prefill_tokens", "pool_size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.align_size < 0 or self.truncation_align_size < 0 or self.max_new_tokens < 0:
            raise ValueError("align sizes and max_new_tokens must be >= 0")
        # The fork only asks `align % page == 0`, so every aligned end is a page boundary.
        if self.align_size and self.align_size % self.page_size:
            raise ValueError(
                f"align_size {self.align_size} must be a multiple of page_size {self.page_size}"
            )
        if self.cache_kind not in ("hybrid", "radix"):
            raise ValueError(f"cache_kind must be 'hybrid' or 'radix', got {self.cache_kind!r}")

    def with_(self, **changes: int | str) -> Config:
        return replace(self, **changes)

    # Page arithmetic at this node's page size (the rules live in ``sizing``).
    def ceil_page(self, n: int) -> int:
        return sizing.ceil_page(n, self.page_size)

    def floor_page(self, n: int) -> int:
        return sizing.floor_page(n, self.page_size)

    def pages_for(self, start: int, end: int) -> int:
        """Slots a piece [start, end) allocates: a prefix's partial last page is reused."""
        return sizing.pages_for(start, end, self.page_size)
