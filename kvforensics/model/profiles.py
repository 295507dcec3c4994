"""Accounting profiles: the arithmetic that differs between code eras, apart from policy.

A policy says what happens around truncation; a profile says how a request is charged and
checked at all. ``fork`` is the code that ran the incident.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvforensics.model.config import Config


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    #: every admitted piece is also charged one page (fork, 0.5.23); 0.5.9 charged none.
    page_charge_per_request: bool = True
    #: the memory check also counts that page.
    check_counts_page: bool = True
    #: refuse a request whose paged extend reaches ``rem_input_tokens`` once the batch holds
    #: one (upstream 0.5.x). The fork's adder has no such check: only ``budget_state``.
    input_tokens_check: bool = False

    def page_charge(self, cfg: Config) -> int:
        return cfg.page_size if self.page_charge_per_request else 0

    def memory_need(self, remaining: int, cfg: Config) -> int:
        """Tokens the memory check asks for: whole remaining prompt, first token, a page."""
        return remaining + cfg.max_new_tokens + (cfg.page_size if self.check_counts_page else 0)


FORK = Profile("fork")
PROFILES: dict[str, Profile] = {FORK.name: FORK}


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown profile {name!r}; choose from {', '.join(PROFILES)}") from None
