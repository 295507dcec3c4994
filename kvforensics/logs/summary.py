"""What a parse saw: counts, samples of what it did not understand, and what it could not read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: the event kinds (names in the format catalogue) a summary's verdicts read
ADDER_CHECK, DECODE_BATCH = "adder_check", "decode_batch"


@dataclass
class FileSummary:
    path: str
    gzip: bool
    bytes_on_disk: int
    bytes_read: int = 0  # decompressed
    lines: int = 0
    ranks: set[str] = field(default_factory=set)
    cut_last_line: bool = False  # no newline at the end: the last line may be cut short
    #: what the lines carry in front of SGLang's text, learned from the file (logs/wrapper.py)
    wrapper: str | None = None


@dataclass
class ParseSummary:
    files: list[FileSummary] = field(default_factory=list)
    matched: dict[str, int] = field(default_factory=dict)
    unmatched: int = 0
    unmatched_samples: list[tuple[str, int, str]] = field(default_factory=list)
    attached_lines: int = 0  # continuation lines owned by multi-line events
    blank_lines: int = 0
    gaps: list[str] = field(default_factory=list)
    prefixed_lines: int = 0  # lines with a line prefix, matched or not
    undated_events: int = 0  # events whose prefix gives no date (time of day only, or none)
    #: lines that matched a format but hold numbers a log cannot mean (logs/sanity.py)
    unreadable: int = 0
    unreadable_samples: list[tuple[str, int, str]] = field(default_factory=list)
    #: ``parse --since/--until``: events left out as outside the times, and events kept
    #: although they carry no time (they cannot be placed outside)
    outside_times: dict[str, int] = field(default_factory=dict)
    untimed_kept: int = 0

    def add_counts(self, x: ParseSummary, samples: int) -> None:
        """Another read's counts added to these (a later part of the same file), its
        samples after these, up to ``samples`` of each kind."""
        for k, v in x.matched.items():
            self.matched[k] = self.matched.get(k, 0) + v
        self.unmatched += x.unmatched
        self.attached_lines += x.attached_lines
        self.blank_lines += x.blank_lines
        self.prefixed_lines += x.prefixed_lines
        self.undated_events += x.undated_events
        self.unreadable += x.unreadable
        self.gaps += x.gaps
        self.unmatched_samples = (self.unmatched_samples + x.unmatched_samples)[:samples]
        self.unreadable_samples = (self.unreadable_samples + x.unreadable_samples)[:samples]

    @property
    def events_kept(self) -> int:
        return self.events - sum(self.outside_times.values())

    @property
    def lines(self) -> int:
        return sum(f.lines for f in self.files)

    @property
    def bytes_read(self) -> int:
        return sum(f.bytes_read for f in self.files)

    @property
    def events(self) -> int:
        return sum(self.matched.values())

    @property
    def decode_node(self) -> bool:
        """Decode batch lines mean a decode (or colocated) node, not a prefill node."""
        return self.matched.get(DECODE_BATCH, 0) > 0

    @property
    def adder_lines(self) -> bool:
        """Any ``PrefillAdder.add_one_req`` check line was read, from any rank."""
        return self.matched.get(ADDER_CHECK, 0) > 0

    @property
    def scheduler_log(self) -> bool:
        """Anything read as a scheduler's: an event, or at least a line with its prefix."""
        return self.events > 0 or self.prefixed_lines > 0

    @property
    def cut_lines(self) -> list[str]:
        return [f.path for f in self.files if f.cut_last_line]

    def to_dict(self) -> dict[str, Any]:
        return {
            "files": [{**f.__dict__, "ranks": sorted(f.ranks)} for f in self.files],
            "lines": self.lines,
            "bytes_read": self.bytes_read,
            "matched": dict(sorted(self.matched.items())),
            "unmatched": self.unmatched,
            "unmatched_samples": [list(s) for s in self.unmatched_samples],
            "attached_lines": self.attached_lines,
            "blank_lines": self.blank_lines,
            "decode_node": self.decode_node,
            "prefixed_lines": self.prefixed_lines,
            "undated_events": self.undated_events,
            "gaps": list(self.gaps),
            "unreadable": self.unreadable,
            "unreadable_samples": [list(s) for s in self.unreadable_samples],
        }

    def notes(self) -> list[str]:
        """What could not be read, one line each: the damage every command passes on."""
        out = [f"{f.path}: {f.wrapper}; read behind it" for f in self.files if f.wrapper]
        out += [f"{p}: ends in a cut line; the log stops mid-write" for p in self.cut_lines]
        out += list(self.gaps)
        if self.unreadable:
            out.append(f"{self.unreadable} line(s) hold numbers a log cannot mean; not used")
            out += [f"  unreadable: {p}:{n}: {why}" for p, n, why in self.unreadable_samples]
        if self.unmatched:
            out.append(f"{self.unmatched} line(s) matched no format")
        return out
