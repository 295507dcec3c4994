"""The adder's two books for one round: compute budget and memory offsets.

Like SGLang 0.5.23's ``PrefillBudget``: the accounting lives in one small object and the
adder only asks it questions. A fresh budget is made every round; both offsets start at 0.
"""

from __future__ import annotations

from enum import StrEnum

from mypy_extensions import mypyc_attr


class AddResult(StrEnum):
    CONTINUE = "CONTINUE"
    NO_TOKEN = "NO_TOKEN"
    OTHER = "OTHER"


@mypyc_attr(allow_interpreted_subclasses=True)  # copy and pickle make one without __init__
class Budget:
    """``rem_total_tokens = B - total_offset`` and ``cur_rem_tokens = B - cur_offset``.

    NOTE: ``cur_offset`` only holds what this batch allocates; ``total_offset`` holds that
    plus what was promised for later rounds (first tokens, and with the fix, tails).
    So ``cur_rem_tokens >= rem_total_tokens`` always.
    """

    __slots__ = ("cur_offset", "rem_chunk", "rem_input", "total_offset")

    def __init__(self, chunked_prefill_size: int, max_prefill_tokens: int):
        self.rem_chunk = chunked_prefill_size
        self.rem_input = max_prefill_tokens
        self.total_offset = 0
        self.cur_offset = 0

    def rem_total(self, baseline: int) -> int:
        return baseline - self.total_offset

    def cur_rem(self, baseline: int) -> int:
        return baseline - self.cur_offset

    def charge(self, paged_piece: int, page_charge: int, later: int) -> None:
        """A piece this batch allocates (``paged_piece`` + the per-request page), plus
        ``later`` tokens promised to later rounds (first token, reserved tail)."""
        now = paged_piece + page_charge
        self.cur_offset += now
        self.total_offset += now + later
        self.rem_chunk -= paged_piece
        self.rem_input -= paged_piece

    def reserve(self, tokens: int) -> None:
        """Promise ``tokens`` to a later round: only the total book sees them."""
        self.total_offset += tokens

    def state(self, baseline: int) -> AddResult:
        if baseline - self.total_offset <= 0 or baseline - self.cur_offset <= 0:
            return AddResult.NO_TOKEN
        if self.rem_input <= 0 or self.rem_chunk <= 0:
            return AddResult.OTHER
        return AddResult.CONTINUE
