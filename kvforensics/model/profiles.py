"""Accounting profiles: the arithmetic that differs between code eras, apart from policy.

A policy says what happens around truncation; a profile says how a request is charged and
checked at all. ``fork`` is the code that ran the incident. ``sglang-X.Y.Z`` is the released
SGLang ``PrefillAdder`` of that release (and of the later ones up to the next profile: see
``Profile.releases``) on a PD prefill node with a single KV pool under ``fcfs``
(``docs/sglang-0.5.23-rules.md``, ``docs/sglang-releases.md``; each held to its release's own
adder decision by decision by ``tests/conformance/test_differential.py``).

Each field is one difference, consulted at exactly one point of ``adder.py`` / ``node.py``.

Pairing: ``sglang-0.5.23`` has no checkpoint alignment and no tail reservation, so it is
meant for policy ``upstream`` (the differential harness runs that pair). With ``prefix``,
``fixed`` or ``drain`` it would describe code that never existed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from mypy_extensions import mypyc_attr

from kvforensics.model.budget import AddResult
from kvforensics.model.config import Config


@mypyc_attr(native_class=False)  # frozen: mypyc's copy and pickle would set its fields
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
    #: the end of a newly truncated piece is floored to a whole page, so a prefix that ends
    #: mid-page gives a shorter piece (0.5.12 on: ``now_input_len`` in
    #: ``PrefillAdder.add_one_req``). Before 0.5.12 the piece is ``floor_page(rem_chunk)``
    #: tokens long from wherever the prefix ends.
    truncated_end_page_floor: bool = True
    #: the memory check first runs on the unlocked baseline and the input-token check runs
    #: before the prefix is locked (0.5.9-0.5.12, ``PrefillAdder.add_one_req``: ``total_tokens
    #: >= rem_total_tokens``, then ``real_input_tokens >= rem_input_tokens``, then
    #: ``_lock_node``). So a request that fails both the locked memory check and the input
    #: check is refused OTHER, not NO_TOKEN.
    input_check_before_lock: bool = False
    #: a hybrid SWA allocator refuses an extend batch whose ``extend_num_tokens`` plus one
    #: page per request exceeds either pool's free slots, whatever whole pages it needs
    #: (0.5.9, 0.5.10: ``mem_cache/swa_memory_pool.py``,
    #: ``SWATokenToKVPoolAllocator.alloc_extend``; 0.5.11 on counts the new pages,
    #: ``get_num_new_pages``). Applied once, when ``PrefillNode`` takes its pool.
    swa_page_per_request: bool = False
    #: the SGLang releases whose adder this profile is (first, last), empty for the fork
    releases: tuple[str, ...] = ()

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

    def refusal_before_lock(
        self, need: int, rem_total_unlocked: int, paged_extend: int, rem_input: int, batch: bool
    ) -> tuple[AddResult, str] | None:
        """The checks that run before the prefix is locked, where they can refuse with a
        different result than the locked ones (``input_check_before_lock``); ``batch``:
        the round already holds a piece."""
        if not self.input_check_before_lock:
            return None
        if need >= rem_total_unlocked:
            return AddResult.NO_TOKEN, f"needs {need} >= rem_total_tokens {rem_total_unlocked}"
        if self.input_tokens_check and batch and paged_extend >= rem_input:
            return AddResult.OTHER, f"extend {paged_extend} >= rem_input_tokens {rem_input}"
        return None

    def covers(self, version: str) -> bool:
        """Whether this profile is the adder of SGLang release ``version``."""
        if not self.releases:
            return False
        v = _release_key(version)
        return _release_key(self.releases[0]) <= v <= _release_key(self.releases[-1])


def _release_key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version)[:3])


FORK = Profile("fork")
#: SGLang 0.5.9 (PyPI wheel), prefill node, single KV pool, fcfs. No page charged per piece
#: (``_update_prefill_budget`` adds only the paged extend and ``max_new``), no page in the
#: memory check, the input-token check always on and before the lock, a truncated piece
#: not page-floored at its end, and the queue loop never stops before a candidate
#: (``Scheduler.get_new_batch_prefill``).
SGLANG_0_5_9 = Profile(
    "sglang-0.5.9",
    page_charge_per_request=False,
    check_counts_page=False,
    input_tokens_check=True,
    skip_waiting_on=frozenset(),
    one_chunked_guard=False,
    max_new_clip=4096,
    load_back_may_fail=True,
    whole_page_free=True,
    truncated_end_page_floor=False,
    input_check_before_lock=True,
    swa_page_per_request=True,
    releases=("0.5.9",),
)
#: 0.5.10: ``_update_prefill_budget`` charges one page per piece (``page_overhead``); the
#: memory check does not count it yet.
SGLANG_0_5_10 = replace(SGLANG_0_5_9, name="sglang-0.5.10", page_charge_per_request=True,
                        releases=("0.5.10",))  # fmt: skip
#: 0.5.11: the memory check counts the page too (``total_tokens = extend + max_new + P``).
#: The SWA allocator asks for the new pages only.
SGLANG_0_5_11 = replace(SGLANG_0_5_10, name="sglang-0.5.11", check_counts_page=True,
                        swa_page_per_request=False, releases=("0.5.11",))  # fmt: skip
#: 0.5.12: a truncated piece's end is floored to a page (``now_input_len``).
SGLANG_0_5_12 = replace(SGLANG_0_5_11, name="sglang-0.5.12", truncated_end_page_floor=True,
                        releases=("0.5.12",))  # fmt: skip
#: 0.5.13 to 0.5.22: the input-token check only with chunked prefill off (which the model
#: does not run), so neither it nor its place before the lock matters. 0.5.20 moved selection
#: into ``_select_prefill_admission`` and 0.5.22 the books into ``PrefillBudget``
#: (``mem_cache/prefill_budget.py``) without changing these rules.
SGLANG_0_5_13 = replace(SGLANG_0_5_12, name="sglang-0.5.13", input_tokens_check=False,
                        input_check_before_lock=False, releases=("0.5.13", "0.5.22"))  # fmt: skip
#: SGLang 0.5.23 as released (PyPI wheel), prefill node, single KV pool, fcfs. Use with
#: policy ``upstream``. The queue loop stops before a candidate on OTHER.
SGLANG_0_5_23 = replace(SGLANG_0_5_13, name="sglang-0.5.23", skip_waiting_on=frozenset({"OTHER"}),
                        releases=("0.5.23",))  # fmt: skip
_ALL = (FORK, SGLANG_0_5_9, SGLANG_0_5_10, SGLANG_0_5_11, SGLANG_0_5_12, SGLANG_0_5_13,
        SGLANG_0_5_23)  # fmt: skip
PROFILES: dict[str, Profile] = {p.name: p for p in _ALL}


def profile_for_release(version: str) -> Profile | None:
    """The profile of SGLang release ``version`` (e.g. "0.5.16"), or None if none covers it."""
    for p in PROFILES.values():
        if p.covers(version):
            return p
    return None


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown profile {name!r}; choose from {', '.join(PROFILES)}") from None


#: the releases the profiles know, oldest first (a release outside them has no profile)
KNOWN_RELEASES = tuple((0, 5, m) for m in range(9, 24))


def profiles_between(
    lo: tuple[int, int, int] | None, hi: tuple[int, int, int] | None
) -> tuple[list[Profile], bool]:
    """Profiles of the known releases from ``lo`` to ``hi`` (None: open), oldest first,
    and whether every release in that span is known (none before 0.5.9 or after 0.5.23)."""
    out: list[Profile] = []
    for r in KNOWN_RELEASES:
        if (lo is None or r >= lo) and (hi is None or r <= hi):
            p = profile_for_release(".".join(map(str, r)))
            if p is not None and p not in out:
                out.append(p)
    inside = (lo is not None and lo >= KNOWN_RELEASES[0]) and (
        hi is not None and hi <= KNOWN_RELEASES[-1]
    )
    return out, inside
