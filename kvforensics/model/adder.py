"""One round's admission decisions: a model of SGLang's ``PrefillAdder`` on a prefill node.

The adder decides who runs and how many tokens each computes; it allocates nothing
except host load-backs (which HiCache does at admission). ``pieces`` is what the
allocator is asked for afterwards.
"""

from __future__ import annotations

from kvforensics.model.budget import AddResult, Budget
from kvforensics.model.config import Config
from kvforensics.model.ledger import Ledger
from kvforensics.model.policies import Policy
from kvforensics.model.pool import PagePool
from kvforensics.model.profiles import FORK, Profile
from kvforensics.model.request import Request

CONTINUE, NO_TOKEN, OTHER = AddResult.CONTINUE, AddResult.NO_TOKEN, AddResult.OTHER


class PrefillAdder:
    def __init__(
        self,
        cfg: Config,
        policy: Policy,
        pool: PagePool,
        *,
        round_no: int = 0,
        ledger: Ledger | None = None,
        profile: Profile = FORK,
        deciding: bool = True,
    ):
        self.cfg = cfg
        self.policy = policy
        self.profile = profile
        self.pool = pool
        self.round = round_no
        self.ledger = ledger
        self.deciding = deciding
        self.budget = Budget(cfg.chunked_prefill_size, cfg.max_prefill_tokens)
        self.page_charge = profile.page_charge(cfg)
        self.max_new = profile.max_new(cfg)
        self.align = policy.end_align(cfg)
        #: (request, start, end) in admission order
        self.pieces: list[tuple[Request, int, int]] = []
        #: the request left half-done by this round (at most one per batch)
        self.new_chunked: Request | None = None
        self.step = 0

    # -- helpers --------------------------------------------------------------
    def budget_state(self) -> AddResult:
        return self.budget.state(self.pool.baseline())

    def _aligned_end(self, start: int, end: int) -> int:
        """Floor a non-last piece's end to the checkpoint align, unless that reaches the start."""
        if self.align:
            aligned = end // self.align * self.align
            if aligned > start:
                return aligned
        return end

    def _log(self, call, req, *values, **extra) -> None:
        """One ledger row (``Ledger.step`` names the values); the after-step books are
        read from the budget here, so call sites pass only what they saw."""
        self.step += 1
        if self.ledger is not None:
            self.ledger.step(self.round, self.step, call, req, self.budget, *values, **extra)

    # -- the chunked request of the previous round ----------------------------
    def add_chunked_req(self, req: Request) -> Request | None:
        """Resume a half-done request. Never refuses: dropping it would leak its KV.

        Returns the request if it is still unfinished after this round's piece.
        """
        cfg, b = self.cfg, self.budget
        base = self.pool.baseline()
        t0, c0, chunk0 = b.total_offset, b.cur_offset, b.rem_chunk
        rem_total = base - t0
        n = min(b.rem_chunk, rem_total)
        forced = n <= 0
        if forced and self.policy.parks(self.deciding):
            return self._park(req, base, t0, c0, chunk0)
        if forced:  # memory is gone but the piece is taken anyway: the incident's last step
            n = b.rem_chunk
        start = req.done
        truncated = req.seq_len - start > n
        end = self._aligned_end(start, start + n) if truncated else req.seq_len
        piece = cfg.ceil_page(end - start)
        b.charge(piece, self.page_charge, 0 if truncated else self.max_new)
        reserved = 0
        if truncated:
            reserved = self.policy.after_truncation(b, req.seq_len - end, cfg, self.deciding)
            self.new_chunked = req
        self.pieces.append((req, start, end))
        state = b.state(base)
        self._log(
            "add_chunked_req",
            req,
            base,
            base,
            t0,
            c0,
            chunk0,
            "resumed",
            start,
            end,
            0,
            state.value,
            reserved,
            forced=forced,
        )
        return req if truncated else None

    def _park(self, req: Request, base: int, t0: int, c0: int, chunk0: int) -> Request:
        """No piece this round: the request stays chunked, nothing is charged, and the
        budget (memory gone) keeps the waiting queue out too."""
        self.new_chunked = req
        state = self.budget.state(base)
        self._log(
            "add_chunked_req", req, base, base, t0, c0, chunk0, "parked", req.done, req.done,
            0, state.value, 0, forced=False, reason=f"rem_total_tokens {base - t0} <= 0: parked",
        )
        return req

    # -- a waiting request ----------------------------------------------------
    def add_one_req(self, req: Request) -> AddResult:
        cfg, b, pool = self.cfg, self.budget, self.pool
        base_unlocked = pool.baseline()
        pool.lock(req.prefix_keys)
        base = pool.baseline()
        t0, c0, chunk0 = b.total_offset, b.cur_offset, b.rem_chunk
        rem_total = base - t0
        # The whole remaining prompt, host hits included: every later piece comes out of
        # the same pool.
        need = self.profile.memory_need(req.seq_len - req.device_prefix, cfg)
        prefix = req.device_prefix + req.host_hit
        early = self.profile.refusal_before_lock(
            need, base_unlocked - t0, cfg.ceil_page(req.seq_len - prefix), b.rem_input,
            bool(self.pieces),
        )  # fmt: skip
        if early is not None:
            return self._reject(req, base, t0, c0, chunk0, *early)
        result, reason, truncated, end = self._select(req, need, rem_total, prefix)
        if result is not None:
            return self._reject(req, base, t0, c0, chunk0, result, reason)

        # Admitted. HiCache allocates the host hit's slots now, outside the offsets.
        loaded = req.host_hit
        if (
            loaded
            and self.profile.load_back_may_fail
            and not pool.can_allocate(cfg.pages_for(req.device_prefix, prefix))
        ):
            # Nothing loads: select again with the host part recomputed.
            loaded, prefix = 0, req.device_prefix
            result, reason, truncated, end = self._select(req, need, rem_total, prefix)
            if result is not None:
                return self._reject(req, base, t0, c0, chunk0, result, reason)
        if loaded:
            pool.alloc(req.rid, req.device_prefix, prefix, op="load_back")
        piece = cfg.ceil_page(end - prefix)
        reserved = 0
        if truncated:
            b.charge(piece, self.page_charge, 0)
            reserved = self.policy.after_truncation(b, req.seq_len - end, cfg, self.deciding)
            self.new_chunked = req
        else:
            b.charge(piece, self.page_charge, self.max_new)
        req.done = prefix
        self.pieces.append((req, prefix, end))
        base_after = pool.baseline()
        state = b.state(base_after)
        self._log(
            "add_one_req",
            req,
            base,
            base_after,
            t0,
            c0,
            chunk0,
            "truncated" if truncated else "full",
            prefix,
            end,
            loaded,
            state.value,
            reserved,
        )
        return state

    def _select(
        self, req: Request, need: int, rem_total: int, prefix: int
    ) -> tuple[AddResult | None, str | None, bool, int]:
        """Admit whole, truncate or refuse, allocating nothing.

        Returns (refusal or None, reason, truncated, end).
        """
        cfg, b = self.cfg, self.budget
        paged_extend = cfg.ceil_page(req.seq_len - prefix)
        truncated, end = False, req.seq_len
        if need >= rem_total:
            return NO_TOKEN, f"needs {need} >= rem_total_tokens {rem_total}", truncated, end
        if self.profile.input_tokens_check and paged_extend >= b.rem_input and self.pieces:
            reason = f"extend {paged_extend} >= rem_input_tokens {b.rem_input}"
            return OTHER, reason, truncated, end
        if paged_extend <= b.rem_chunk:
            return None, None, truncated, end
        truncated = True
        if self.profile.one_chunked_guard and self.new_chunked is not None:
            reason = f"would be a second chunked request beside {self.new_chunked.rid}"
            return OTHER, reason, truncated, end
        e = cfg.floor_page(b.rem_chunk)
        if cfg.truncation_align_size:
            e = e // cfg.truncation_align_size * cfg.truncation_align_size
        end = self._aligned_end(prefix, self.profile.truncated_end(cfg, prefix, e))
        if end <= prefix:
            return OTHER, f"chunk budget {b.rem_chunk} leaves no whole page", truncated, end
        return None, None, truncated, end

    def _reject(self, req, base, t0, c0, chunk0, result: AddResult, reason) -> AddResult:
        self.pool.unlock(req.prefix_keys)
        self._log(
            "add_one_req",
            req,
            base,
            base,
            t0,
            c0,
            chunk0,
            "rejected",
            None,
            None,
            0,
            result.value,
            0,
            reason=reason,
        )
        return result
