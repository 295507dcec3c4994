"""What the detectors read of a replay: the rebuilt rounds, the forward runs, the model
profile they ran under, the baseline's unexplained falls and what anchoring the runs to
the observations found (``replay.ReplayResult``, or the replay's forward runs before the
findings, ``replay.stages.Ran``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from kvforensics.model import RunResult
from kvforensics.rounds import Rebuild
from kvforensics.rounds.drop import Drop

if TYPE_CHECKING:
    from kvforensics.replay.anchor import Anchoring
    from kvforensics.replay.profile_choice import ProfileChoice


class Replayed(Protocol):
    @property
    def rebuild(self) -> Rebuild: ...

    @property
    def results(self) -> Mapping[str, RunResult]: ...

    @property
    def profile(self) -> ProfileChoice | None: ...

    @property
    def drops(self) -> Sequence[Drop]: ...

    @property
    def anchoring(self) -> Anchoring | None: ...
