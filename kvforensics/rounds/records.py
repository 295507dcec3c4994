"""What the rounds stage hands on: typed records of the rebuilt rounds (dicts only in
``as_dict``, at the JSON edge)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from mypy_extensions import mypyc_attr

from kvforensics.model import Config
from kvforensics.model.sizing import pages_for
from kvforensics.rounds.provenance import Prov


# compiled, a plain class: copy and pickle cannot set a native frozen dataclass's fields
@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class Contradiction:
    """Two pieces of evidence that cannot both hold (``round`` None: no round to pin it on)."""

    round: int | None
    what: str
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"round": self.round, "what": self.what, "detail": self.detail}


# compiled, a plain class: copy and pickle cannot set a native frozen dataclass's fields
@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class LoggedOom:
    """The out-of-memory line as logged; ``round`` and ``rid`` once the rebuild has placed
    it (the request the scheduler pins it on)."""

    tokens: int | None
    available: int | None
    available_size: int | None = None
    evictable_size: int | None = None
    where: str | None = None
    time: str | None = None
    swa_available: int | None = None
    swa_available_size: int | None = None
    swa_evictable_size: int | None = None
    mamba_available: int | None = None
    mamba_available_size: int | None = None
    mamba_evictable_size: int | None = None
    round: int | None = None
    rid: str | None = None
    #: the locked root-to-node path lengths of the tree dump after the message
    #: (``logs.tree``): where a chunked request stood at the crash, when one is there
    tree_paths: tuple[int, ...] = ()

    def placed(self, round: int | None, rid: str | None = None) -> LoggedOom:
        return replace(self, round=round, rid=rid)

    def as_dict(self) -> dict[str, Any]:
        # the tree's paths are evidence the rebuild cites, not a figure of the message
        return {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "tree_paths"}


# compiled, a plain class: copy and pickle cannot set a native frozen dataclass's fields
@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class BatchLine:
    """Another rank's batch line (PP3's ``Prefill batch``) matched to a round: what it
    printed, None where the line's format lacks a field."""

    rank: str
    new_token: int | None
    new_seq: int | None
    inflight_req: int | None
    queue_req: int | None
    cached_token: int | None
    where: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "new_token": self.new_token,
            "new_seq": self.new_seq,
            "inflight_req": self.inflight_req,
            "queue_req": self.queue_req,
            "cached_token": self.cached_token,
            "where": self.where,
        }


# compiled, a plain class: copy and pickle cannot set a native frozen dataclass's fields
@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class PlanReplay:
    """Another PP rank's replayed plan matched to a round."""

    rank: str
    rids: list[str] | None
    extend_tokens: int | None
    where: str


# init=False and a hand-written __init__ (here and in Piece and Round): mypyc compiles it,
# while the one dataclass() writes stays interpreted, a call per record the rebuild makes;
# dataclass() still gives the fields, __eq__ and __repr__, and replace() calls this __init__
@mypyc_attr(allow_interpreted_subclasses=True)  # copy and pickle make one without __init__
@dataclass(slots=True, init=False)
class Decision:
    """One ``add_one_req``: the check line and its result line."""

    rid: str
    seq_len: int
    prefix_len: int
    host_hit_len: int
    rem_chunk_tokens: int
    baseline: int
    rem_total_tokens: int
    cur_rem_tokens: int
    where: str
    decision: str | None = None
    start: int | None = None
    end: int | None = None
    result: str | None = None
    loaded: int | None = 0  # None: the load-back line's number was unreadable

    def __init__(
        self,
        rid: str,
        seq_len: int,
        prefix_len: int,
        host_hit_len: int,
        rem_chunk_tokens: int,
        baseline: int,
        rem_total_tokens: int,
        cur_rem_tokens: int,
        where: str,
        decision: str | None = None,
        start: int | None = None,
        end: int | None = None,
        result: str | None = None,
        loaded: int | None = 0,
    ) -> None:
        self.rid = rid
        self.seq_len = seq_len
        self.prefix_len = prefix_len
        self.host_hit_len = host_hit_len
        self.rem_chunk_tokens = rem_chunk_tokens
        self.baseline = baseline
        self.rem_total_tokens = rem_total_tokens
        self.cur_rem_tokens = cur_rem_tokens
        self.where = where
        self.decision = decision
        self.start = start
        self.end = end
        self.result = result
        self.loaded = loaded

    def load_back_slots(self, cfg: Config) -> int:
        """Slots the load-back took: whole pages after the device prefix."""
        if self.decision not in ("full", "truncated") or not self.loaded:
            return 0
        # sizing's rule at the config's page (``cfg.pages_for``), called compiled
        return pages_for(self.prefix_len, self.prefix_len + self.loaded, cfg.page_size)

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@mypyc_attr(allow_interpreted_subclasses=True)  # copy and pickle make one without __init__
@dataclass(slots=True, init=False)
class Piece:
    rid: str
    start: int
    end: int
    kind: str  # new | resumed
    provenance: str
    evidence: list[str] = field(default_factory=list)
    cross_checked: bool = False
    interval_end: tuple[int, int] | None = None

    def __init__(
        self,
        rid: str,
        start: int,
        end: int,
        kind: str,
        provenance: str,
        evidence: list[str] | None = None,
        cross_checked: bool = False,
        interval_end: tuple[int, int] | None = None,
    ) -> None:
        self.rid, self.start, self.end, self.kind = rid, start, end, kind
        self.provenance = provenance
        self.evidence = [] if evidence is None else evidence
        self.cross_checked, self.interval_end = cross_checked, interval_end

    def as_dict(self) -> dict[str, Any]:
        d = {
            "rid": self.rid,
            "start": self.start,
            "end": self.end,
            "kind": self.kind,
            "provenance": self.provenance,
            "evidence": self.evidence,
            "cross_checked": self.cross_checked,
        }
        if self.interval_end:
            d["interval_end"] = list(self.interval_end)
        return d


@mypyc_attr(allow_interpreted_subclasses=True)  # copy and pickle make one without __init__
@dataclass(slots=True, init=False)
class Round:
    index: int
    time: datetime | None
    decisions: list[Decision] = field(default_factory=list)
    pieces: list[Piece] = field(default_factory=list)
    as_writes: list[tuple[str, int, str]] = field(default_factory=list)  # rid, blocks, where
    baseline: Prov | None = None  # available + evictable when the adder started
    baseline_end: Prov | None = None  # after the round's allocation
    #: what the first check's prefix lock took before its line was printed, where the
    #: evidence shows it (the resumed chunk, sized before that lock, ran on more)
    first_lock: Prov | None = None
    forwarded: bool = False  # AS writes seen: the forward has run
    oom: LoggedOom | None = None
    batch: BatchLine | None = None  # the PP3 batch line matched to this round
    replays: list[PlanReplay] = field(default_factory=list)  # other PP ranks' plans

    def __init__(
        self,
        index: int,
        time: datetime | None,
        decisions: list[Decision] | None = None,
        pieces: list[Piece] | None = None,
        as_writes: list[tuple[str, int, str]] | None = None,
        baseline: Prov | None = None,
        baseline_end: Prov | None = None,
        first_lock: Prov | None = None,
        forwarded: bool = False,
        oom: LoggedOom | None = None,
        batch: BatchLine | None = None,
        replays: list[PlanReplay] | None = None,
    ) -> None:
        self.index, self.time = index, time
        self.decisions = [] if decisions is None else decisions
        self.pieces = [] if pieces is None else pieces
        self.as_writes = [] if as_writes is None else as_writes
        self.baseline, self.baseline_end, self.first_lock = baseline, baseline_end, first_lock
        self.forwarded, self.oom, self.batch = forwarded, oom, batch
        self.replays = [] if replays is None else replays

    @property
    def observed(self) -> bool:
        return bool(self.decisions)

    def new_tokens(self) -> int:
        return sum(p.end - p.start for p in self.pieces)

    def as_dict(self) -> dict[str, Any]:
        return {
            "round": self.index,
            "time": self.time.isoformat(sep=" ") if self.time else None,
            "observed": self.observed,
            "pieces": [p.as_dict() for p in self.pieces],
            "baseline": self.baseline.as_dict() if self.baseline else None,
            "baseline_end": self.baseline_end.as_dict() if self.baseline_end else None,
            "decisions": [d.as_dict() for d in self.decisions],
            "as_writes": [{"rid": r, "blocks": b, "where": w} for r, b, w in self.as_writes],
            "oom": self.oom.as_dict() if self.oom else None,
            "batch": self.batch.as_dict() if self.batch else None,
        } | ({"first_lock": self.first_lock.as_dict()} if self.first_lock else {})
