"""From an incident to its reproducer: the start state (a replay's, or a scenario's), the
target's rules, the shrinking, the link rounds, and the three outputs."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from kvforensics.errors import InputError
from kvforensics.model import POLICIES
from kvforensics.reproduce import limits
from kvforensics.reproduce.case import Case, from_node, from_scenario
from kvforensics.reproduce.chain import OUTSIDE, find_chain
from kvforensics.reproduce.links import RESUMED, LinkTest, chain_round, resumed_round
from kvforensics.reproduce.pytest_out import TARGETS, render
from kvforensics.reproduce.shrink import Shrinker, Shrunk, why_not
from kvforensics.reproduce.toml_out import dumps


@dataclass(frozen=True, slots=True)
class Reproducer:
    source: str
    target: str
    fix: str
    shrunk: Shrunk
    tests: tuple[LinkTest, ...]
    #: links without a test, and why
    omitted: tuple[str, ...]
    toml: str
    #: the test file's text; None when no adder test can guard the cause
    test_text: str | None
    keeps: tuple[str, ...]
    drops: tuple[str, ...]

    @property
    def test_name(self) -> str:
        return f"test_prefill_adder_{self.shrunk.case.name.replace('-', '_')}.py"

    def write(self, out: Path) -> list[Path]:
        from kvforensics.outputs import atomic_write_text

        paths = [out / "reproducer.toml"]
        atomic_write_text(paths[0], self.toml)
        if self.test_text is not None:
            paths.append(out / self.test_name)
            atomic_write_text(paths[1], self.test_text)
        return paths


def case_from_replay(rr, name: str) -> Case:
    """The replay's start state, when its cause is one ``reproduce`` reduces."""
    held = [c.id for c in rr.causes if c.held]
    if not rr.rebuild.oom or rr.build_node is None:
        raise InputError("these logs show no out-of-memory to reproduce")
    if "unreserved_tail" not in held and "external_allocation" not in held:
        raise InputError(
            "reproduce reduces an unreserved tail or an outside allocation; the causes held "
            f"here are: {', '.join(held) or 'none'}"
        )
    return from_node(rr.build_node("prefix"), name)


def case_from_scenario(sc, name: str) -> Case:
    return replace(from_scenario(sc), name=name)


def for_target(case: Case, target: str) -> Case:
    """The case under the target's rules: the fork's, or a release's, where the fork's
    checkpoint alignment becomes ``truncation_align_size`` (the release's own knob)."""
    if target not in TARGETS:
        raise InputError(f"unknown --target {target!r}; choose from {', '.join(TARGETS)}")
    if target == "fork":
        if case.profile != "fork":
            raise InputError(f"{case.name}: its profile is {case.profile}; --target fork needs the fork's")
        return case
    align = case.size("truncation_align_size") or case.size("align_size")
    moved = case.with_sizes(align_size=0, truncation_align_size=align)
    return replace(moved, profile=target)


def make(case: Case, *, source: str, target: str = "fork", fix: str = "fixed") -> Reproducer:
    if fix not in POLICIES or fix == "prefix":
        others = ", ".join(p for p in POLICIES if p != "prefix")
        raise InputError(f"unknown --policy {fix!r} for the fix; choose from {others}")
    start = for_target(case, target)
    if find_chain(start, fix) is None:
        raise InputError(
            f"{source}: under the {target} rules the incident's chain does not hold "
            f"({why_not(start, fix)}); no reproducer"
        )
    shrunk = Shrinker(start, fix).run()
    tests, omitted = _links(shrunk, fix, target)
    keeps, drops = limits.keeps(shrunk, fix), limits.drops(shrunk, source)
    toml = dumps(shrunk.case.tables(limits.description(shrunk, fix, source)),
                 limits.toml_comments(shrunk))  # fmt: skip
    text = None
    if tests:
        text = render(shrunk.case, list(tests), target, source=source,
                      scenario=f"reproducer.toml ({shrunk.case.name})",
                      story=limits.story(shrunk, fix), limits=[*keeps, *drops])  # fmt: skip
    return Reproducer(source, target, fix, shrunk, tests, omitted, toml, text, keeps, drops)


def _links(shrunk: Shrunk, fix: str, target: str) -> tuple[tuple[LinkTest, ...], tuple[str, ...]]:
    """A test per link: the round the intruder came in, and the resumed piece's."""
    chain = shrunk.chain
    if chain.kind == OUTSIDE:
        tokens = sum(t for _, t in chain.outside)
        return (), (
            f"the memory was taken outside the adder ({tokens} tokens): no adder change can "
            "guard it, so no adder test is emitted; the scenario alone reproduces it",
        )
    tests, omitted = [], []
    first = chain_round(shrunk.case, chain, fix)
    (tests if isinstance(first, LinkTest) else omitted).append(first)
    if isinstance(first, LinkTest) and first.name == RESUMED:
        return tuple(tests), tuple(omitted)
    second = resumed_round(shrunk.case, chain, fix)
    if isinstance(second, LinkTest):
        tests.append(second)
    elif target != "fork":
        omitted.append(
            f"no resumed-chunk test: {target} does not align a resumed piece, which takes "
            "min(rem_chunk_tokens, rem_total_tokens); cut short by memory it leaves none, so "
            f"no waiting request gets in after it (the model: {second})"
        )
    else:
        omitted.append(f"no resumed-chunk test: {second}")
    return tuple(tests), tuple(omitted)
