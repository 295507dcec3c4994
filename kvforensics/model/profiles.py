"""Accounting profiles: the arithmetic that differs between code eras, apart from policy.

A policy says what happens around truncation; a profile says how a request is charged and
checked at all. ``fork`` is the code that ran the incident. ``sglang-0.5.23`` is the released
SGLang 0.5.23 ``PrefillAdder`` on a PD prefill node with a single KV pool under ``fcfs``
(``docs/sglang-0.5.23-rules.md``; held to SGLang's own adder decision by decision by
``tests/conformance/test_differential.py``).

Each field is one difference, consulted at exactly one point of ``adder.py`` / ``node.py``.

Pairing: ``sglang-0.5.23`` has no checkpoint alignment and no tail reservation, so it is
meant for policy ``upstream`` (the differential harness runs that pair). With ``prefix``,
``fixed`` or ``drain`` it would describe code that never existed.
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
    #: (0.5.23 has it only with chunked prefill off, which the model does not run.)
    input_tokens_check: bool = False
    #: budget states after a resumed chunk that skip the whole waiting queue
    #: (``PrefillNode.step``). Fork: anything but CONTINUE. 0.5.23 only breaks the queue
    #: loop before a candidate on OTHER, so a NO_TOKEN still runs one ``add_one_req`` that
    #: answers NO_TOKEN (``managers/scheduler.py``, ``Scheduler._get_new_batch_prefill_raw``).
    skip_waiting_on: frozenset[str] = frozenset({"NO_TOKEN", "OTHER"})
    #: a request that would be truncated while the round already holds a chunked request
    #: gets OTHER (``PrefillAdder.add_one_req``). 0.5.23 checks this only under
    #: ``shortest-prefill-first`` (``managers/schedule_policy.py``,
    #: ``PrefillAdder._select_prefill_admission``); under fcfs a second truncation happens
    #: and overwrites ``new_chunked_req``.
    one_chunked_guard: bool = True
    #: cap on the ``max_new_tokens`` that the memory check counts and a last piece charges
    #: (0: none). 0.5.23 clips both at ``CLIP_MAX_NEW_TOKENS`` (env
    #: ``SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION``, default 4096): ``schedule_policy.py``,
    #: ``PrefillAdder.add_one_req``, ``_select_prefill_admission``, ``add_chunked_req``.
    max_new_clip: int = 0
    #: a host load-back that cannot get its pages loads nothing and the request is selected
    #: again as if it had no host hit (the host part is recomputed). Fork: load-back always
    #: takes the slots (an impossible one is an out-of-memory). 0.5.23:
    #: ``PrefillAdder.add_one_req`` re-runs ``_select_prefill_admission`` with
    #: ``host_hit_length=0`` when ``tree_cache.init_load_back`` returns 0
    #: (``mem_cache/hiradix_cache.py``, ``HiRadixCache.init_load_back``).
    load_back_may_fail: bool = False
    #: the free part of the baseline is whole pages: ``available_size()`` is free pages x
    #: page size (``mem_cache/allocator/paged.py``, ``PagedTokenToKVPoolAllocator``). Fork:
    #: the pool's free count as given (the postmortem's "12000 free" at page 64).
    #: Applied once, when ``PrefillNode`` takes its pool.
    whole_page_free: bool = False

    # Not fields, because both eras agree on a prefill node: ``truncation_align_size``
    # floors only a newly truncated piece (``_select_prefill_admission``), never a resumed
    # one (``add_chunked_req``); the resumed piece is ``min(rem_chunk, rem_total)`` with the
    # forced branch when that is <= 0 (``mem_cache/prefill_budget.py``,
    # ``PrefillBudget.available_chunk_tokens``); the memory check is one strict check under
    # the lock (``PrefillBudget.check_prefill``).

    def page_charge(self, cfg: Config) -> int:
        return cfg.page_size if self.page_charge_per_request else 0

    def max_new(self, cfg: Config) -> int:
        """``max_new_tokens`` as the check counts it and a last piece charges it."""
        clip = self.max_new_clip
        return min(cfg.max_new_tokens, clip) if clip else cfg.max_new_tokens

    def check_page(self, cfg: Config) -> int:
        """The page the memory check counts (``sizing.memory_need``), 0 when it counts none."""
        return cfg.page_size if self.check_counts_page else 0


FORK = Profile("fork")
#: SGLang 0.5.23 as released (PyPI wheel), prefill node, single KV pool, fcfs. Use with
#: policy ``upstream``.
SGLANG_0_5_23 = Profile(
    "sglang-0.5.23",
    skip_waiting_on=frozenset({"OTHER"}),
    one_chunked_guard=False,
    max_new_clip=4096,
    load_back_may_fail=True,
    whole_page_free=True,
)
PROFILES: dict[str, Profile] = {p.name: p for p in (FORK, SGLANG_0_5_23)}


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown profile {name!r}; choose from {', '.join(PROFILES)}") from None
