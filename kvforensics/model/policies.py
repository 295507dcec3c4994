"""Named admission policies. Each differs from the others in exactly the hooks it overrides.

| policy   | checkpoint align | after a truncation                          |
|----------|------------------|---------------------------------------------|
| upstream | none             | nothing (truncation spends the budget)      |
| prefix   | config align     | nothing: the tail is promised to nobody     |
| fixed    | config align     | tail + first token reserved (deciding rank) |
| drain    | config align     | chunk budget set to 0: the round ends       |
| park     | config align     | as fixed; a resumed chunk with no memory    |
|          |                  | left waits a round instead of being forced  |
"""

from __future__ import annotations

from kvforensics.model import sizing
from kvforensics.model.budget import Budget
from kvforensics.model.config import Config

#: the policy the logs ran under, and the fix the stages set beside it (names below)
AS_RAN, FIX = "prefix", "fixed"


class Policy:
    """The pre-fix fork (``prefix``): aligned non-last pieces, tail not reserved."""

    name = "prefix"
    description = "the fork at the incident: 256-aligned pieces, truncated tail not reserved"

    def end_align(self, cfg: Config) -> int:
        """Alignment of the end of a non-last piece (0: none)."""
        return cfg.align_size

    def after_truncation(self, budget: Budget, tail: int, cfg: Config, deciding: bool) -> int:
        """Called once a piece is cut short with ``tail`` tokens left for later rounds.

        Returns the tokens reserved for the tail (0 when the policy reserves nothing).
        """
        return 0

    def parks(self, deciding: bool) -> bool:
        """With ``rem_total_tokens <= 0``, leave the resumed chunk out of this round
        (True) instead of taking ``rem_chunk_tokens`` anyway (the forced branch)."""
        return False


class Upstream(Policy):
    name = "upstream"
    description = "SGLang without checkpoint alignment: truncation spends the chunk budget"

    def end_align(self, cfg: Config) -> int:
        return 0


class Fixed(Policy):
    name = "fixed"
    description = (
        "the postmortem's fix: a truncated request's tail is charged to rem_total_token_offset"
    )

    def after_truncation(self, budget: Budget, tail: int, cfg: Config, deciding: bool) -> int:
        # Only the deciding rank (PP0) reserves: a replaying rank charging it too could
        # reject what PP0 admitted, and the stages' batches would disagree.
        if tail <= 0 or not deciding:
            return 0
        reserved = sizing.tail_need(tail, cfg.page_size, cfg.max_new_tokens)
        budget.reserve(reserved)
        return reserved


class Drain(Policy):
    name = "drain"
    description = "the rejected alternative: a truncation zeroes the chunk budget, ending the round"

    def after_truncation(self, budget: Budget, tail: int, cfg: Config, deciding: bool) -> int:
        budget.rem_chunk = 0
        return 0


class Park(Fixed):
    name = "park"
    description = (
        "the fix, and a resumed chunk with no memory left waits for memory instead of being forced"
    )

    def parks(self, deciding: bool) -> bool:
        # SGLang main: ``PrefillAdder.add_chunked_req`` (managers/schedule_policy.py) returns
        # the chunked request untouched when ``memory_budget.available_chunk_tokens`` gives
        # None (mem_cache/prefill_budget.py; the SWA budgets do so when nothing is left, and
        # PR #30743 asks the same of the single pool). The postmortem deferred this for PP:
        # only the deciding rank parks; a replaying rank resumes the chunk whenever PP0's
        # plan holds it, so the stages' batches stay the same.
        return deciding


POLICIES: dict[str, Policy] = {
    p.name: p for p in (Upstream(), Policy(), Fixed(), Drain(), Park())
}


assert POLICIES[AS_RAN].name == AS_RAN and POLICIES[FIX].name == FIX


def get_policy(name: str) -> Policy:
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}") from None
