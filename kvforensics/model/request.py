"""A request as the prefill node sees it."""

from __future__ import annotations

from dataclasses import dataclass, field

from mypy_extensions import mypyc_attr


# init=False and the __init__ below: mypyc compiles a hand-written __init__, while the one
# dataclass() writes stays interpreted (a call per request a re-run builds); dataclass()
# still gives the fields, __eq__ and __repr__, and replace() calls this __init__
@mypyc_attr(allow_interpreted_subclasses=True)  # copy and pickle make one without __init__
@dataclass(slots=True, init=False)
class Request:
    """One prompt waiting for, or in, prefill.

    ``device_prefix`` tokens are already in the device cache (under ``prefix_keys``);
    ``host_hit`` more tokens after them sit in the host cache and are loaded back at
    admission. ``done`` is how far prefill has got (prefix included): the next piece
    starts there.
    """

    rid: str
    seq_len: int
    device_prefix: int = 0
    host_hit: int = 0
    #: cache entries that hold the device prefix; locking them takes them out of the
    #: evictable part of the pool. Empty when the prefix is held by someone else already.
    prefix_keys: tuple[str, ...] = ()
    arrival: float = 0.0
    #: keys under which this request's own KV becomes cache once its transfer ends
    #: (one per block for trace-driven runs; a single key otherwise).
    cache_keys: tuple[tuple[str, int], ...] = ()
    done: int = 0
    admitted_round: int | None = None
    finished_round: int | None = None
    finished_time: float | None = None
    pieces: list[tuple[int, int, int]] = field(default_factory=list)  # (round, start, end)

    def __init__(
        self,
        rid: str,
        seq_len: int,
        device_prefix: int = 0,
        host_hit: int = 0,
        prefix_keys: tuple[str, ...] = (),
        arrival: float = 0.0,
        cache_keys: tuple[tuple[str, int], ...] = (),
        done: int = 0,
        admitted_round: int | None = None,
        finished_round: int | None = None,
        finished_time: float | None = None,
        pieces: list[tuple[int, int, int]] | None = None,
    ) -> None:
        if seq_len <= 0:
            raise ValueError(f"{rid}: seq_len must be positive")
        if device_prefix < 0 or host_hit < 0:
            raise ValueError(f"{rid}: prefix lengths must be >= 0")
        if device_prefix + host_hit >= seq_len:
            raise ValueError(
                f"{rid}: device_prefix + host_hit ({device_prefix + host_hit}) "
                f"must leave at least one token to compute (seq_len {seq_len})"
            )
        self.rid = rid
        self.seq_len = seq_len
        self.device_prefix = device_prefix
        self.host_hit = host_hit
        self.prefix_keys = prefix_keys
        self.arrival = arrival
        self.cache_keys = cache_keys
        self.done = done
        self.admitted_round = admitted_round
        self.finished_round = finished_round
        self.finished_time = finished_time
        self.pieces = [] if pieces is None else pieces
