"""Does the model describe the code that ran? Each logged round re-run under ``prefix``,
as the rounds stream by (``FidelityCheck``), summed up in one ``Fidelity`` record."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from operator import attrgetter
from typing import Any

from mypy_extensions import mypyc_attr

from kvforensics.model.ledger import Step
from kvforensics.model.policies import AS_RAN
from kvforensics.model.profiles import FORK, Profile
from kvforensics.replay.state import Sizes, node_at
from kvforensics.rounds import Rebuild, Round

#: logged field -> ledger column
FIELDS = {
    "decision": "decision",
    "start": "start",
    "end": "end",
    "result": "budget_state",
    "baseline": "baseline",
    "rem_total_tokens": "rem_total_tokens",
    "cur_rem_tokens": "cur_rem_tokens",
    "rem_chunk_tokens": "rem_chunk_tokens",
}
#: fields a cut log may lack (the result line was never written)
_MAY_LACK = ("decision", "start", "end", "result")


# compiled, a plain class: copy and pickle cannot set a native frozen dataclass's fields
@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class Mismatch:
    """A logged number the model gives otherwise (``rid`` None: the count of steps)."""

    round: int
    rid: str | None
    field: str
    # Any, not object: mypyc's dataclasses look a field's type up among the module's
    # names, and ``object`` is not one of them
    logged: Any
    model: Any
    where: str | None = None

    def as_dict(self) -> dict[str, Any]:
        d = {"round": self.round, "rid": self.rid, "field": self.field,
             "logged": self.logged, "model": self.model}  # fmt: skip
        if self.where is not None:
            d["where"] = self.where
        return d


# compiled, a plain class: copy and pickle cannot set a native frozen dataclass's fields
@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class Fidelity:
    """The logged rounds re-run, what differed, and the baseline falls nothing explains."""

    rounds_checked: int
    mismatches: tuple[Mismatch, ...]
    unexplained_drops: int | None = None

    def with_drops(self, n: int) -> Fidelity:
        return replace(self, unexplained_drops=n)

    def as_dict(self) -> dict[str, Any]:
        d = {"rounds_checked": self.rounds_checked,
             "mismatches": [m.as_dict() for m in self.mismatches]}  # fmt: skip
        if self.unexplained_drops is not None:
            d["unexplained_drops"] = self.unexplained_drops
        return d


#: every logged field of a decision, and the ledger columns they are compared with, at once
_LOGGED, _MODEL = attrgetter(*FIELDS), attrgetter(*FIELDS.values())


def compare(rnd: Round, steps: list[Step]) -> list[Mismatch]:
    """The logged round against the model's steps of it."""
    rows = [s for s in steps if s.call == "add_one_req"]
    out = []
    if len(rows) != len(rnd.decisions):
        out.append(Mismatch(rnd.index, None, "steps", len(rnd.decisions), len(rows)))
    for d, row in zip(rnd.decisions, rows, strict=False):
        wants, gots = _LOGGED(d), _MODEL(row)
        if wants == gots:
            continue  # every field agrees (the rules below only excuse differences)
        # the values already read, in FIELDS' order (a refusal's logged piece, say, comes
        # here for every rejected request: no second read by name)
        for logged, want, got in zip(FIELDS, wants, gots, strict=True):
            if logged in ("start", "end") and d.decision == "rejected":
                continue
            if want is None and logged in _MAY_LACK:
                continue
            if want != got:
                out.append(Mismatch(rnd.index, d.rid, logged, want, got, d.where))
    return out


@dataclass
class FidelityCheck:
    """Fed one rebuilt round at a time; ``result()`` is the record."""

    known: Sizes  # cfg and seq_lens (a ``Rebuild`` or the stream's own)
    policy: str = AS_RAN
    profile: Profile = FORK
    checked: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)

    def add(self, rnd: Round, steps: list[Step] | None = None) -> None:
        """Re-run ``rnd`` (no-op without adder lines); ``steps``: a re-run of it under
        this policy already made."""
        if not rnd.decisions:
            return
        self.checked += 1
        if steps is None:
            # the adder's own steps are all ``compare`` reads: no ledger to keep
            node = node_at(self.known, rnd, self.policy, profile=self.profile, ops=False,
                           record=False)  # fmt: skip
            steps = node.batch().adder.steps
        self.mismatches.extend(compare(rnd, steps))

    def result(self) -> Fidelity:
        return Fidelity(self.checked, tuple(self.mismatches))


def check_fidelity(rb: Rebuild, policy: str = AS_RAN, profile: Profile = FORK) -> Fidelity:
    """Every logged round of ``rb`` re-run under ``policy``."""
    check = FidelityCheck(rb, policy, profile)
    for rnd in rb.rounds:
        check.add(rnd)
    return check.result()
