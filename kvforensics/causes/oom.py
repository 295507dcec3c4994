"""The logged out-of-memory as the verdict and the reports read it, and the one place
its ask is put into words (every report and table says it the same way)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kvforensics.model import OutOfMemory
from kvforensics.rounds.records import LoggedOom


@dataclass(frozen=True, slots=True, kw_only=True)
class OomFigures:
    """What the out-of-memory line says once placed: the round and request it is pinned
    on, the tokens asked for and what the full pool had; a second pool's total where the
    message prints one (SWA, mamba)."""

    round: int | None
    rid: str | None
    tokens: int | None
    available: int | None
    swa_available: int | None = None
    mamba_available: int | None = None

    @classmethod
    def of(cls, o: LoggedOom) -> OomFigures:
        return cls(
            round=o.round,
            rid=o.rid,
            tokens=o.tokens,
            available=o.available,
            swa_available=o.swa_available,
            mamba_available=o.mamba_available,
        )

    def met_by(self, got: OutOfMemory | None) -> bool:
        """Whether a forward run's out-of-memory is this one exactly: round, request,
        tokens asked and what was available (what "reproduces" means everywhere)."""
        return got is not None and (got.round, got.rid, got.tokens, got.available) == (
            self.round, self.rid, self.tokens, self.available,
        )  # fmt: skip

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "round": self.round,
            "rid": self.rid,
            "tokens": self.tokens,
            "available": self.available,
        }
        extra = {"swa_available": self.swa_available, "mamba_available": self.mamba_available}
        out.update({k: v for k, v in extra.items() if v is not None})
        return out


#: how the ask is joined to what was available: "N tokens, A available" (a table cell, a
#: list), "N tokens with A available" (prose), "allocating N (A available)" (a round's
#: row), "needs N, A available" (a figure's label, with thousands separators)
Form = Literal["comma", "with", "allocating", "needs"]


def oom_words(tokens: object, available: object, *, rid: str | None = None,
              form: Form = "comma") -> str:  # fmt: skip
    """The out-of-memory's ask in words; with ``rid``, who asked ("X tried to allocate
    N tokens ..."; in a figure "X needs N, ...")."""
    if form == "allocating":
        return f"allocating {tokens} ({available} available)"
    if form == "needs":
        text = f"needs {tokens:,}, {available:,} available"
        return f"{rid} {text}" if rid is not None else text
    text = f"{tokens} tokens{' with' if form == 'with' else ','} {available} available"
    return f"{rid} tried to allocate {text}" if rid is not None else text
