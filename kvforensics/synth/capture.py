"""Step a model node round by round and keep what the log writers need per round: the
adder's ledger rows, the batch, and the queue, transfer and pool sizes the batch line
reports."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kvforensics.model import Config, OutOfMemory, PrefillNode, RoundRecord
from kvforensics.model.ledger import Step


@dataclass(slots=True)
class RoundCapture:
    round: int
    start: float  # model seconds: the round's decisions
    end: float  # after its forward (== start when nothing ran)
    #: (rid, start, end) in batch order; for the out-of-memory round, what was planned
    pieces: list[tuple[str, int, int]]
    #: the adder's ledger rows (add_chunked_req / add_one_req), in order
    steps: list[Step]
    skipped_waiting: bool
    queue_len: int  # waiting requests after admission
    inflight: int  # requests in KV transfer when the batch was formed
    available: int  # pool after the allocation
    evictable: int

    @property
    def new_tokens(self) -> int:
        return sum(e - s for _, s, e in self.pieces)

    def admitted(self) -> list[Step]:
        return [s for s in self.steps if s.call == "add_one_req" and s.decision != "rejected"]


def number(value: int | None) -> int:
    """A count an admitted adder step always holds (the ledger's ``Step`` makes every
    field optional, for the kinds of step that lack it)."""
    assert value is not None
    return value


def piece(s: Step) -> tuple[str, int, int]:
    """An admitted step's piece: (rid, start, end)."""
    assert s.rid is not None
    return s.rid, number(s.start), number(s.end)


@dataclass
class Capture:
    cfg: Config
    rounds: list[RoundCapture] = field(default_factory=list)
    oom: OutOfMemory | None = None
    #: the round that hit ``oom`` (its adder steps and planned pieces), if any
    oom_round: RoundCapture | None = None


def capture_run(node: PrefillNode, *, max_rounds: int | None = None) -> Capture:
    """Run ``node`` (which must record a ledger) to the end, an out-of-memory or
    ``max_rounds`` rounds, capturing every round."""
    if node.ledger is None:
        raise ValueError("the node must record a ledger (record=True)")
    cap = Capture(node.cfg)
    rows = node.ledger.rows
    while max_rounds is None or len(cap.rounds) < max_rounds:
        k = len(rows)
        out = node.step()
        if out is None:
            break
        steps = [r for r in rows[k:] if r.call != "allocate"]
        if isinstance(out, OutOfMemory):
            planned = [piece(r) for r in steps if r.decision != "rejected"]
            cap.oom = out
            cap.oom_round = _round(node, out.round, node.now, node.now, planned, steps, True, 0)
            break
        assert isinstance(out, RoundRecord)
        end = out.time
        if out.pieces:
            end = out.time + node.timing.round_seconds(sum(e - s for _, s, e in out.pieces))
        finished_now = sum(1 for rid, _s, e in out.pieces if e >= node.requests[rid].seq_len)
        cap.rounds.append(
            _round(
                node, out.round, out.time, end, out.pieces, steps, out.skipped_waiting, finished_now
            )
        )
    return cap


def _round(
    node: PrefillNode,
    no: int,
    start: float,
    end: float,
    pieces: Iterable[tuple[str, int, int]],
    steps: list[Step],
    skipped: bool,
    finished_now: int,
) -> RoundCapture:
    pool = node.pool
    return RoundCapture(
        round=no,
        start=start,
        end=end,
        pieces=list(pieces),
        steps=steps,
        skipped_waiting=skipped,
        queue_len=len(node.waiting),
        # requests that finished in this round joined the transfer queue after the batch
        inflight=node.inflight_count() - finished_now,
        available=pool.available_size(),
        evictable=pool.evictable_size(),
    )
