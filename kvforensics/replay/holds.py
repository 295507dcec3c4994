"""How far each policy's answer holds over what the logs leave unknown.

A forward run past the last observation needs two things the logs do not pin down: how
long a KV transfer takes, and, where an event was found between two silent rounds, which
of them it preceded. A policy's answer is run over every transfer time tried (from the
log's lower bound up) and every placement the evidence allows; it is stated as holding
only where every case agrees, and otherwise with the range where it does."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvforensics.replay.unseen import UnseenTake

#: multiples of the longest transfer time the log suggests, tried beyond it
BEYOND = (2.0, 4.0)


@dataclass(frozen=True, slots=True)
class Case:
    seconds: float
    #: which placement of the found events (0: the latest; -1: the earliest)
    pick: int
    #: a take that left nothing available asked for all it could get (its size is a
    #: lower bound in the logs)
    most: bool
    oom: bool
    #: every event that many rounds later (< 0: earlier): under another policy the time
    #: an event happened may fall in another round
    offset: int = 0
    #: the end of the window in which the logs show no KV transfer ended, that many
    #: rounds later (< 0: earlier): it is a time too (the logged crash's), and under
    #: another policy that time may fall in another round
    hold: int = 0
    #: more memory came back from KV transfers than the observations require, and
    #: something outside the adder took the difference before the crash round (the
    #: out-of-memory line's 0 available hides it): ``Anchoring.can_swap``
    swap: bool = False


@dataclass(frozen=True, slots=True)
class HoldsFor:
    """One policy's answer over the unknowns: ``answer`` is ``out of memory``, ``no out
    of memory`` or ``depends``."""

    policy: str
    answer: str
    cases: tuple[Case, ...]
    #: the transfer times the log allows, as far as it bounds them (lower, upper or None)
    allowed: tuple[float, float | None]
    #: for "no out of memory": the least take outside the adder, where the logs could not
    #: show one, that undoes it (None: no round was blind, or it was not searched)
    unseen: UnseenTake | None = None

    def sentence(self) -> str:
        tried = sorted({c.seconds for c in self.cases})
        span = f"{tried[0]:.2f}-{tried[-1]:.2f} s" if len(tried) > 1 else f"{tried[0]:.2f} s"
        places = len({c.pick for c in self.cases}) > 1
        sizes = len({c.most for c in self.cases}) > 1
        moved = len({c.offset for c in self.cases}) > 1
        held = len({c.hold for c in self.cases}) > 1
        swapped = len({c.swap for c in self.cases}) > 1
        parts = [f"every transfer time tried ({span})"]
        parts += ["every placement of the events the evidence allows"] if places else []
        parts += ["the events a round earlier or later"] if moved else []
        parts += ["the transfers the logs hold back ending a round earlier or later"] if held else []
        parts += (
            ["whatever size the outside allocation had (the logs bound it below)"] if sizes else []
        )
        parts += [_SWAP[True]] if swapped else []
        every = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
        if self.answer == "no out of memory":
            u = self.unseen
            tail = f"; {u.sentence()}" if u is not None and u.least_slots is not None else ""
            return f"avoids it for {every}{tail}"
        if self.answer == "out of memory":
            return f"runs out of memory for {every}"
        return "depends on the unobserved: " + self._where()

    def _where(self) -> str:
        """Where the answer changes: a transfer-time threshold, else the placement."""
        by_s: dict[float, set[bool]] = {}
        for c in self.cases:
            by_s.setdefault(c.seconds, set()).add(c.oom)
        if all(len(v) == 1 for v in by_s.values()):
            ok = sorted(s for s, v in by_s.items() if v == {False})
            bad = sorted(s for s, v in by_s.items() if v == {True})
            if ok and bad and min(ok) > max(bad):
                return f"avoids it only if transfers take at least {min(ok):.2f} s (runs out at {max(bad):.2f} s)"
            if ok and bad and max(ok) < min(bad):
                return f"avoids it only if transfers take at most {max(ok):.2f} s (runs out at {min(bad):.2f} s)"
            return (
                "avoids it at "
                + ", ".join(f"{s:.2f}" for s in ok)
                + " s of transfer time, not at "
                + ", ".join(f"{s:.2f}" for s in bad)
                + " s"
            )
        if any(c.oom for c in self.cases if c.most) and not any(
            c.oom for c in self.cases if not c.most
        ):
            return (
                "avoids it only if what was taken outside the adder was no more than the logs "
                "show it got (they show 0 available after it: it may have wanted more)"
            )
        if len({c.offset for c in self.cases}) > 1 and all(
            len({c.oom for c in self.cases if c.offset == o}) == 1
            for o in {c.offset for c in self.cases}
        ):
            return (
                "avoids it or not depending on which round, under this policy, the events "
                "found between observations fall in (they happened at a time, not a round)"
            )
        if len({c.hold for c in self.cases}) > 1 and all(
            len({c.oom for c in self.cases if c.hold == h}) == 1
            for h in {c.hold for c in self.cases}
        ):
            return (
                "avoids it or not depending on which round, under this policy, the KV "
                "transfers the logs show still running at the crash end in (the logs bound "
                "their end by a time, not a round)"
            )
        only = self._only_if()
        if only:
            return "avoids it only if " + " and ".join(only)
        return "avoids it or not depending on when the events between silent rounds happened"

    def _only_if(self) -> list[str]:
        """The conditions the answer "avoids it" needs: for each unknown that decides (a
        case that avoids it and one that runs out differ in it alone), what every case
        that avoids it has of it."""
        ok = [c for c in self.cases if not c.oom]
        bad = [c for c in self.cases if c.oom]
        out = []
        if self._decides("seconds"):
            fast, slow = max(c.seconds for c in ok), min(c.seconds for c in ok)
            out += [f"transfers take at most {fast:.2f} s"] if any(c.seconds > fast for c in bad) else []
            out += [f"transfers take at least {slow:.2f} s"] if any(c.seconds < slow for c in bad) else []
        for name, says in (("hold", _HOLD), ("offset", _OFFSET), ("pick", _PICK)):
            seen = {getattr(c, name) for c in ok}
            if len(seen) == 1 and self._decides(name):
                out.append(says[next(iter(seen))])
        if {c.most for c in ok} == {False} and self._decides("most"):
            out.append("what was taken outside the adder was no more than the logs show it got")
        seen = {c.swap for c in ok}
        if len(seen) == 1 and self._decides("swap"):
            out.append(_SWAP_ONLY[next(iter(seen))])
        return out

    def _decides(self, name: str) -> bool:
        """Whether two cases that differ only in ``name`` give different answers."""
        dims = ("seconds", "pick", "most", "offset", "hold", "swap")
        rest = [d for d in dims if d != name]
        answers: dict[tuple[object, ...], set[bool]] = {}
        for c in self.cases:
            answers.setdefault(tuple(getattr(c, d) for d in rest), set()).add(c.oom)
        return any(len(v) > 1 for v in answers.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "answer": self.answer,
            "says": self.sentence(),
            "transfer_seconds_allowed": list(self.allowed),
            "cases": [
                {"transfer_seconds": c.seconds, "placement": c.pick, "most": c.most, "oom": c.oom}
                | ({"round_offset": c.offset} if c.offset else {})
                | ({"hold_offset": c.hold} if c.hold else {})
                | ({"more_back_and_taken": True} if c.swap else {})
                for c in self.cases
            ],
        } | ({"unseen_take": self.unseen.as_dict()} if self.unseen is not None else {})


#: the conditions ``HoldsFor._only_if`` names, by the value every avoiding case shares
_HOLD = {
    -1: "the KV transfers the logs show running at the crash end a round earlier under it "
    "(the logs bound their end by a time, not a round)",
    0: "the KV transfers the logs show running at the crash end in the round the logs do",
    1: "the KV transfers the logs show running at the crash end a round later under it",
}
_OFFSET = {
    -1: "the events found between observations fall a round earlier under it",
    0: "the events found between observations fall in the rounds the logs place them in",
    1: "the events found between observations fall a round later under it",
}
_SWAP = {
    True: "more memory back from KV transfers than the logs require with the difference "
    "taken outside the adder before the crash round (the out-of-memory line's 0 available "
    "would hide it)",
}
_SWAP_ONLY = {
    False: "no more memory came back from KV transfers than the logs require (more back, "
    "and the difference taken outside the adder before the crash round, meets the same "
    "observations)",
    True: "more memory came back from KV transfers than the logs require, and the "
    "difference was taken outside the adder before the crash round",
}
_PICK = {
    0: "the events between silent rounds happened at the latest the evidence allows",
    -1: "the events between silent rounds happened at the earliest the evidence allows",
}


def tried_seconds(chosen: float, readings: dict[str, float], lower: float | None) -> list[float]:
    """Transfer times to try: the log's lower bound (else the shortest reading), the one
    chosen, the longest reading, and multiples of it (the log bounds them from above only
    by what its traffic showed)."""
    lo = lower if lower is not None else min([chosen, *readings.values()])
    hi = max([chosen, lo, *readings.values()])
    # NOTE: the chosen time is tried exactly: the policies' own runs use it, and an answer
    # can turn between it and its rounded value
    # NOTE: the bound is rounded up, never down: rounded down it fell below itself and
    # was filtered out below, and the fastest time the log allows was never tried
    low = round(max(lo, 0.01), 2)
    low = round(low + 0.01, 2) if low < lo else low
    got = {low, chosen, round(hi, 2)}
    got.update(round(hi * k, 2) for k in BEYOND)
    return sorted(s for s in got if lower is None or s >= lower)


#: one case's schedule: (pick, most, offset, hold, swap) as ``Case`` names them
Pick = tuple[int, bool, int, int, bool]


def holds_for(
    policy: str,
    run: Callable[[float, int, bool, int, int, bool], bool],
    seconds: list[float],
    picks: list[Pick],
    allowed: tuple[float, float | None],
) -> HoldsFor:
    """``run(seconds, pick, most, offset, hold, swap)`` is True when the policy runs out
    of memory then; ``picks``: the schedules to try (``Pick``)."""
    cases = tuple(
        Case(s, p, m, run(s, p, m, o, h, w), o, h, w)
        for s in seconds
        for p, m, o, h, w in picks
    )
    ooms = {c.oom for c in cases}
    answer = (
        "depends" if len(ooms) > 1 else ("out of memory" if True in ooms else "no out of memory")
    )
    return HoldsFor(policy, answer, cases, allowed)
