"""The one way into the rounds stage from log files: read, check, configure, rebuild,
cross-check. Every command that reads logs comes through ``from_logs``, so each runs the
same input checks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import polars as pl

from kvforensics.errors import InputError
from kvforensics.logs import read_events
from kvforensics.logs.summary import ParseSummary
from kvforensics.progress import current
from kvforensics.rounds.config import check_overrides, read_config
from kvforensics.rounds.crosscheck import cross_check
from kvforensics.rounds.rebuild import Rebuild, rebuild_rounds
from kvforensics.rounds.records import Round


class Window(Protocol):
    """The rounds to keep (``stream.Narrow``): false when it keeps them all."""

    def __bool__(self) -> bool: ...

    def within(self, rnd: Round) -> bool: ...

    def trim(self, rb: Rebuild) -> None: ...


@dataclass
class LogRounds:
    """What the logs gave: their events, what was read of them, and the rebuilt rounds
    (None: the logs have no adder line, and the caller asked to be told rather than
    refused)."""

    events: pl.DataFrame
    summary: ParseSummary
    rebuild: Rebuild | None


def has_adder_lines(events: pl.DataFrame) -> bool:
    return bool(events.height and (events["kind"] == "adder_check").any())


def check_prefill(has_adder: bool, summary: ParseSummary) -> None:
    """Refuse logs no round can come from (a decode node's); say why in one line."""
    if summary.decode_node and not has_adder:
        raise InputError(
            "these are a decode (or colocated) node's logs (Decode batch lines): "
            "kvforensics replays prefill nodes"
        )


def require_adder_lines(has_adder: bool) -> None:
    """Replaying needs the adder's lines; a log without them can still be read for rounds."""
    if not has_adder:
        raise InputError(
            "no PrefillAdder lines in these logs, nothing to replay: give the deciding rank's "
            "(PP0) log of a build that prints them (upstream SGLang releases do not)"
        )


def from_logs(
    paths: list[Path],
    *,
    overrides: dict[str, int | None] | None = None,
    rank: str | None = None,
    formats: list[Path] | None = None,
    progress: bool = False,
    need_adder: bool = False,
    hold: bool = False,
    narrow: Window | None = None,
) -> LogRounds:
    """Logs -> rounds, every event and round kept. Raises InputError (one line) for input
    that gives none. ``hold``: logs without adder lines come back with no rebuild (for the
    caller to say what they can tell) instead of being checked further; ``narrow``
    (``stream.Narrow``): only the rounds within ``--since``/``--until`` are kept."""
    check_overrides(overrides or {})
    events, summary = read_events([Path(p) for p in paths], extra_formats=formats, progress=progress)
    if hold and not has_adder_lines(events):
        return LogRounds(events, summary, None)
    check_prefill(has_adder_lines(events), summary)
    if need_adder:
        require_adder_lines(has_adder_lines(events))
    cfg, conf = read_config(events, overrides or {}, summary.unreadable_samples)
    rebuilt = current().stage("rebuilding rounds", unit="rounds")
    rb = rebuild_rounds(events, cfg, conf, rank=rank)
    rebuilt.advance(len(rb.rounds))
    rebuilt.done()
    cross_check(rb, events)
    if narrow:
        rb.rounds = [r for r in rb.rounds if narrow.within(r)]
        narrow.trim(rb)
    return LogRounds(events, summary, rb)
