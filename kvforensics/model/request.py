"""A request as the prefill node sees it."""

from __future__ import annotations

from dataclasses import dataclass, field

from mypy_extensions import mypyc_attr


@mypyc_attr(allow_interpreted_subclasses=True)  # copy and pickle make one without __init__
@dataclass(slots=True)
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

    def __post_init__(self) -> None:
        if self.seq_len <= 0:
            raise ValueError(f"{self.rid}: seq_len must be positive")
        if self.device_prefix < 0 or self.host_hit < 0:
            raise ValueError(f"{self.rid}: prefix lengths must be >= 0")
        if self.device_prefix + self.host_hit >= self.seq_len:
            raise ValueError(
                f"{self.rid}: device_prefix + host_hit ({self.device_prefix + self.host_hit}) "
                f"must leave at least one token to compute (seq_len {self.seq_len})"
            )
