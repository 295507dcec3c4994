"""Values that say where they came from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mypy_extensions import mypyc_attr

OBSERVED, DERIVED, INFERRED, GIVEN = "observed", "derived", "inferred", "given"


# init=False and a hand-written __init__: mypyc compiles it, while the one dataclass()
# writes stays interpreted (a call per number the rebuild records); dataclass() still
# gives the fields, __eq__ and __repr__, and replace() calls this __init__
@mypyc_attr(allow_interpreted_subclasses=True)  # copy and pickle make one without __init__
@dataclass(slots=True, init=False)
class Prov:
    """A number with its provenance.

    ``observed``: printed in a log line (evidence = ``file:line``); ``derived``: arithmetic
    on observed values; ``inferred``: a model rule applied to evidence (which, and which
    rule, in ``evidence``); ``given``: from the command line. ``interval`` bounds a value
    that is not pinned down.
    """

    value: int | None
    provenance: str
    evidence: list[str] = field(default_factory=list)
    interval: tuple[int, int] | None = None

    def __init__(
        self,
        value: int | None,
        provenance: str,
        evidence: list[str] | None = None,
        interval: tuple[int, int] | None = None,
    ) -> None:
        self.value = value
        self.provenance = provenance
        self.evidence = [] if evidence is None else evidence
        self.interval = interval

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "value": self.value,
            "provenance": self.provenance,
            "evidence": self.evidence,
        }
        if self.interval is not None:
            d["interval"] = list(self.interval)
        return d


def where(ev: dict[str, Any]) -> str:
    """``file:line`` of an event row (file name only: logs move between machines)."""
    return f"{str(ev['file']).rsplit('/', 1)[-1]}:{ev['line']}"
