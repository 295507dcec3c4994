"""Which model profile a replay runs: the one given, the one the log's lines tell
(``logs/release.py``), or the default, each with its reason for the output."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvforensics.errors import InputError
from kvforensics.logs.release import ReleaseEvidence, detect_release
from kvforensics.model.profiles import FORK, Profile, get_profile, profiles_between


@dataclass(frozen=True, slots=True)
class ProfileChoice:
    profile: Profile
    how: str  # given | detected | default
    why: str
    evidence: ReleaseEvidence | None = None

    def as_dict(self) -> dict[str, Any]:
        ev = self.evidence
        return {
            "name": self.profile.name,
            "how": self.how,
            "why": self.why,
            "release": None if ev is None or ev.how in ("fork", "other") else ev.span(),
            "where": None if ev is None else ev.where,
            "line": None if ev is None else ev.line,
        }

    def describe(self) -> str:
        return f"{self.profile.name} ({self.how}: {self.why})"


def choose_profile(
    paths: list[Path], given: str | None = None, default: Profile = FORK
) -> ProfileChoice:
    """``given`` (``--profile``) wins; else what the lines tell, if it names one profile;
    else ``default``, saying why."""
    if given is not None:
        try:
            return ProfileChoice(get_profile(given), "given", "--profile")
        except ValueError as exc:
            raise InputError(str(exc)) from None
    ev, notes = detect_release([Path(p) for p in paths])
    if ev is None:
        why = "; ".join(notes) or "no line tells the release"
        return ProfileChoice(default, "default", why)
    if ev.how == "fork":
        return ProfileChoice(FORK, "detected", f"{ev.reason} at {ev.where}", ev)
    if ev.how == "other":
        return ProfileChoice(
            default, "default", f"{ev.reason} at {ev.where}: no SGLang release", ev
        )
    found, inside = profiles_between(ev.lo, ev.hi)
    said = f"{ev.reason} at {ev.where}: SGLang {ev.span()}"
    if len(found) == 1 and inside:
        return ProfileChoice(found[0], "detected", said, ev)
    if not found:
        return ProfileChoice(default, "default", f"{said}, which no profile covers", ev)
    names = " or ".join(p.name for p in found)
    more = "" if inside else " or a release no profile covers"
    return ProfileChoice(default, "default", f"{said} ({names}{more}); give --profile", ev)
