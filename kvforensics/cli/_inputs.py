"""The options every command that reads logs takes, declared once.

A command lists the aliases below in its signature and packs them with `LogOptions`;
the library gets them as one `replay.ReplayOptions` value, so a new input flag is added
here, in `LogOptions` and in `ReplayOptions` only."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kvforensics.errors import InputError

if TYPE_CHECKING:
    from kvforensics.progress import Stages
    from kvforensics.replay.stages import ReplayOptions
    from kvforensics.rounds.stream import Narrow

_IN = "Log input"

PageSize = Annotated[
    int | None,
    typer.Option(
        "--page-size", help="Page size, if the log lacks startup lines.", rich_help_panel=_IN
    ),
]
Align = Annotated[
    int | None,
    typer.Option("--align", help="Checkpoint end align size (0: none).", rich_help_panel=_IN),
]
Chunk = Annotated[
    int | None, typer.Option("--chunk-size", help="chunked_prefill_size.", rich_help_panel=_IN)
]
Pool = Annotated[
    int | None, typer.Option("--pool-size", help="max_total_num_tokens.", rich_help_panel=_IN)
]
Rank = Annotated[
    str | None,
    typer.Option(
        "--rank", help="The deciding rank (default: the one with adder lines).", rich_help_panel=_IN
    ),
]
Formats = Annotated[
    list[Path] | None,
    typer.Option(
        "--formats",
        help="Extra format catalogue TOML for a fork's own lines (repeatable).",
        rich_help_panel=_IN,
    ),
]
TransferSeconds = Annotated[
    float | None,
    typer.Option(
        "--transfer-seconds",
        help="KV transfer time; default: inferred from the log.",
        rich_help_panel=_IN,
    ),
]
ProfileName = Annotated[
    str | None,
    typer.Option(
        "--profile",
        help="Model profile (fork, sglang-0.5.9 ... sglang-0.5.23); default: the one the "
        "log's lines tell, else fork.",
        rich_help_panel=_IN,
    ),
]

Since = Annotated[
    str | None,
    typer.Option(
        "--since",
        help="Only rounds from this round number or time ('2026-11-02 15:00:00') on.",
        rich_help_panel=_IN,
    ),
]
Until = Annotated[
    str | None,
    typer.Option(
        "--until", help="Only rounds up to this round number or time.", rich_help_panel=_IN
    ),
]
NoProgress = Annotated[
    bool,
    typer.Option(
        "--no-progress",
        help="No progress bars on stderr (they are off anyway when stderr is not a terminal).",
        rich_help_panel=_IN,
    ),
]


@dataclass(frozen=True, slots=True)
class LogOptions:
    """What a command was told about its logs beyond the files themselves."""

    page_size: int | None = None
    align: int | None = None
    chunk_size: int | None = None
    pool_size: int | None = None
    rank: str | None = None
    formats: list[Path] | None = None
    transfer_seconds: float | None = None
    since: str | None = None
    until: str | None = None
    no_progress: bool = False
    profile: str | None = None

    def narrow(self) -> Narrow:
        """``--since``/``--until`` checked (a bad value is a one-line error)."""
        from kvforensics.rounds.stream import Narrow

        return Narrow.parse(self.since, self.until)

    def stages(self) -> Stages:
        """The progress display (``kvforensics.progress``): asked for, and stderr is a
        terminal."""
        from kvforensics.cli._common import stages

        return stages(not self.no_progress)

    def overrides(self) -> dict[str, int | None]:
        """The sizes, under the names the configuration reader uses."""
        return {
            "page_size": self.page_size,
            "align_size": self.align,
            "chunked_prefill_size": self.chunk_size,
            "pool_size": self.pool_size,
        }

    def replay_options(
        self, policies: Sequence[str] = (), *, stream: bool = False, whole_log: bool = False,
        jobs: int | None = None, engine: str = "local", costs: bool = False,
    ) -> ReplayOptions:  # fmt: skip
        """How `replay_logs` replays the logs: as given here, running ``policies`` forward
        besides ``prefix`` (the rest: ``replay.ReplayOptions``)."""
        from kvforensics.replay.stages import ReplayOptions

        return ReplayOptions(
            policies, overrides=self.overrides(), transfer_seconds=self.transfer_seconds,
            rank=self.rank, formats=self.formats, narrow=self.narrow(), profile=self.profile,
            stream=stream, whole_log=whole_log, jobs=jobs, engine=engine, costs=costs,
        )  # fmt: skip


def check_format(fmt: str, choices: tuple[str, ...]) -> str:
    """An output format the command knows, else a one-line error (exit 2)."""
    if fmt not in choices:
        raise InputError(f"unknown --format {fmt!r}; choose from {', '.join(choices)}")
    return fmt
