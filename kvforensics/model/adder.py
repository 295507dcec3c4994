"""One round's admission decisions: a model of SGLang's ``PrefillAdder`` on a prefill node.

The adder decides who runs and how many tokens each computes; it allocates nothing
except host load-backs (which HiCache does at admission). ``pieces`` is what the
allocator is asked for afterwards.
"""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from kvforensics.model import sizing
from kvforensics.model.budget import AddResult, Budget
from kvforensics.model.config import Config
from kvforensics.model.ledger import Ledger, Step, appender, from_values
from kvforensics.model.policies import Policy
from kvforensics.model.pool import PagePool
from kvforensics.model.profiles import FORK, Profile
from kvforensics.model.request import Request

# imported by name: one global lookup interpreted, a direct call compiled
from kvforensics.model.sizing import ceil_page, memory_need

CONTINUE, NO_TOKEN, OTHER = AddResult.CONTINUE, AddResult.NO_TOKEN, AddResult.OTHER
#: a result's name as the record keeps it (a dict lookup: cheaper than ``.value``)
_NAME = {r: r.value for r in AddResult}


@mypyc_attr(allow_interpreted_subclasses=True)  # the conformance harness records through one
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
        self.check_page = profile.check_page(cfg)
        self.align = policy.end_align(cfg)
        self.page = cfg.page_size
        self.early_checks = profile.input_check_before_lock
        self.input_check = profile.input_tokens_check
        #: how a step reaches the ledger (None: no ledger)
        self._to_ledger = appender(ledger)
        #: (request, start, end) in admission order
        self.pieces: list[tuple[Request, int, int]] = []
        #: the request left half-done by this round (at most one per batch)
        self.new_chunked: Request | None = None
        #: this round's records, in call order (kept whether or not a ledger records them)
        self.steps: list[Step] = []
        self.step = 0

    # -- helpers --------------------------------------------------------------
    def budget_state(self) -> AddResult:
        return self.budget.state(self.pool.baseline())

    # -- the chunked request of the previous round ----------------------------
    def add_chunked_req(self, req: Request) -> Step:
        """Resume a half-done request. Never refuses: dropping it would leak its KV.

        ``new_chunked`` is the request afterwards if this piece did not finish it.
        """
        cfg, b = self.cfg, self.budget
        base = self.pool.baseline()
        before = (base, b.total_offset, b.cur_offset, b.rem_chunk, b.rem_input)
        rem_total = base - b.total_offset
        if min(b.rem_chunk, rem_total) <= 0 and self.policy.parks(self.deciding):
            return self._park(req, before, rem_total)
        start = req.done
        # When memory is gone the piece is taken anyway (forced): the incident's last step.
        size = sizing.resumed_piece(start, req.seq_len, b.rem_chunk, rem_total, self.align)
        piece = ceil_page(size.end - start, cfg.page_size)
        b.charge(piece, self.page_charge, 0 if size.truncated else self.max_new)
        reserved, tail_need = 0, None
        if size.truncated:
            tail_need = sizing.tail_need(req.seq_len - size.end, cfg.page_size, cfg.max_new_tokens)
            reserved = self.policy.after_truncation(b, req.seq_len - size.end, cfg, self.deciding)
            self.new_chunked = req
        self.pieces.append((req, start, size.end))
        # It allocates nothing, so the baseline stays.
        return self._record(
            req, "add_chunked_req", before, base, "resumed", start, size.end, 0,
            _NAME[b.state(base)], reserved, size.forced, None, None, size.unaligned_end,
            tail_need,
        )  # fmt: skip

    def _park(self, req: Request, before: tuple[int, int, int, int, int], rem_total: int) -> Step:
        """No piece this round: the request stays chunked, nothing is charged, and the
        budget (memory gone) keeps the waiting queue out too."""
        self.new_chunked = req
        base = before[0]
        return self._record(
            req, "add_chunked_req", before, base, "parked", req.done, req.done, 0,
            _NAME[self.budget.state(base)], 0, False, f"rem_total_tokens {rem_total} <= 0: parked",
            None, None, None,
        )  # fmt: skip

    # -- a waiting request ----------------------------------------------------
    # The hot path of every long run: one call per queued request per round. It reads
    # each attribute once into a local and builds its record positionally.
    def add_one_req(self, req: Request) -> Step:
        """Admit whole, truncate or refuse; the record's ``budget_state`` says whether the
        adder goes on (CONTINUE) or stops."""
        b, pool, page = self.budget, self.pool, self.page
        seq, dp, hh, keys = req.seq_len, req.device_prefix, req.host_hit, req.prefix_keys
        base_unlocked = pool.baseline()
        # the lock takes the prefix out of the evictable part: the baseline drops by that
        base = base_unlocked - pool.lock(keys) if keys else base_unlocked
        before = (base, b.total_offset, b.cur_offset, b.rem_chunk, b.rem_input)
        rem_total = base - before[1]
        # The whole remaining prompt, host hits included: every later piece comes out of
        # the same pool.
        need = memory_need(seq - dp, self.max_new, self.check_page)
        prefix = dp + hh
        if self.early_checks:
            early = self.profile.refusal_before_lock(
                need, base_unlocked - before[1], ceil_page(seq - prefix, page), b.rem_input,
                bool(self.pieces),
            )  # fmt: skip
            if early is not None:
                return self._reject(req, before, need, *early)
        refusal, reason, size = self._select(req, need, rem_total, prefix)
        if refusal is not None:
            return self._reject(req, before, need, refusal, reason)

        # Admitted. HiCache allocates the host hit's slots now, outside the offsets.
        loaded = hh
        if (
            loaded
            and self.profile.load_back_may_fail
            and not pool.can_allocate(sizing.pages_for(dp, prefix, page))
        ):
            # Nothing loads: select again with the host part recomputed.
            loaded, prefix = 0, dp
            refusal, reason, size = self._select(req, need, rem_total, prefix)
            if refusal is not None:
                return self._reject(req, before, need, refusal, reason)
        if loaded:
            pool.alloc(req.rid, dp, prefix, op="load_back")
        reserved = 0
        tail_need = None
        if size is not None:
            end, raw = size.end, size.unaligned_end
            b.charge(ceil_page(end - prefix, page), self.page_charge, 0)
            tail_need = sizing.tail_need(seq - end, page, self.cfg.max_new_tokens)
            reserved = self.policy.after_truncation(b, seq - end, self.cfg, self.deciding)
            self.new_chunked = req
            decision = "truncated"
        else:
            end = raw = seq
            b.charge(ceil_page(end - prefix, page), self.page_charge, self.max_new)
            decision = "full"
        req.done = prefix
        self.pieces.append((req, prefix, end))
        base_after = pool.baseline()
        return self._record(
            req, "add_one_req", before, base_after, decision, prefix, end, loaded,
            _NAME[b.state(base_after)], reserved, None, None, need, raw, tail_need,
        )  # fmt: skip

    def _select(
        self, req: Request, need: int, rem_total: int, prefix: int
    ) -> tuple[AddResult | None, str | None, sizing.Sized | None]:
        """Admit whole, truncate or refuse, allocating nothing.

        Returns (refusal or None, reason, the truncated piece's size or None if whole).
        """
        b = self.budget
        paged_extend = ceil_page(req.seq_len - prefix, self.page)
        if need >= rem_total:
            return NO_TOKEN, f"needs {need} >= rem_total_tokens {rem_total}", None
        if self.input_check and paged_extend >= b.rem_input and self.pieces:
            return OTHER, f"extend {paged_extend} >= rem_input_tokens {b.rem_input}", None
        if paged_extend <= b.rem_chunk:
            return None, None, None
        if self.profile.one_chunked_guard and self.new_chunked is not None:
            reason = f"would be a second chunked request beside {self.new_chunked.rid}"
            return OTHER, reason, None
        cfg = self.cfg
        size = sizing.truncated_end(
            prefix,
            b.rem_chunk,
            cfg.page_size,
            cfg.truncation_align_size,
            self.align,
            page_floor=self.profile.truncated_end_page_floor,
        )
        if size.end <= prefix:
            return OTHER, f"chunk budget {b.rem_chunk} leaves no whole page", size
        return None, None, size

    def _reject(
        self,
        req: Request,
        before: tuple[int, int, int, int, int],
        need: int,
        result: AddResult,
        reason: str | None,
    ) -> Step:
        self.pool.unlock(req.prefix_keys)
        return self._record(
            req, "add_one_req", before, before[0], "rejected", None, None, 0, _NAME[result], 0,
            None, reason, need, None, None,
        )  # fmt: skip

    def _record(
        self,
        req: Request,
        call: str,
        before: tuple[int, int, int, int, int],
        base_after: int,
        decision: str,
        start: int | None,
        end: int | None,
        load_back: int,
        state: str,
        reserved: int,
        forced: bool | None,
        reason: str | None,
        need: int | None,
        unaligned_end: int | None,
        tail_need: int | None,
    ) -> Step:
        """The record of one adder call, built positionally (the hot path), kept in
        ``steps`` and the ledger. ``before`` is (baseline, total offset, cur offset, chunk
        budget, input budget) when the call looked; the books after are read now."""
        base, t0, c0, chunk0, input0 = before
        b = self.budget
        self.step += 1
        step = from_values(
            (
                self.round,  # round
                self.step,  # step
                call,  # call
                req.rid,  # rid
                req.seq_len,  # seq_len
                req.device_prefix,  # device_prefix
                req.host_hit,  # host_hit
                base,  # baseline
                base_after,  # baseline_after
                t0,  # total_offset_before
                b.total_offset,  # total_offset_after
                c0,  # cur_offset_before
                b.cur_offset,  # cur_offset_after
                base - t0,  # rem_total_tokens
                base - c0,  # cur_rem_tokens
                chunk0,  # rem_chunk_tokens
                b.rem_chunk,  # rem_chunk_after
                decision,  # decision
                start,  # start
                end,  # end
                load_back,  # load_back
                None,  # allocated
                state,  # budget_state
                reserved,  # reserved_tail
                forced,  # forced
                reason,  # reason
                need,  # need
                unaligned_end,  # unaligned_end
                tail_need,  # tail_need
                input0,  # rem_input_tokens
                b.rem_input,  # rem_input_after
            )
        )
        self.steps.append(step)
        if self._to_ledger is not None:
            self._to_ledger(step)
        return step
