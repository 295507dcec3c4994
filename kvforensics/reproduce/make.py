"""From an incident to its reproducer: the start state (a replay's, or a scenario's), the
target's rules, the shrinking, the link rounds, and the three outputs."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvforensics.errors import InputError
from kvforensics.model import POLICIES
from kvforensics.model.policies import AS_RAN
from kvforensics.reproduce import limits
from kvforensics.reproduce.case import Case, from_node, from_scenario
from kvforensics.reproduce.chain import OUTSIDE, find_chain
from kvforensics.reproduce.links import RESUMED, LinkTest, chain_round, resumed_round
from kvforensics.reproduce.pytest_out import TARGETS, render
from kvforensics.reproduce.shrink import Shrinker, Shrunk, why_not
from kvforensics.reproduce.toml_out import dumps

if TYPE_CHECKING:
    from kvforensics.replay.replay import ReplayOptions, ReplayResult
    from kvforensics.scenario import Scenario


@dataclass(frozen=True, slots=True)
class Reduction:
    """How far the shrinking got: the requests and the pool before and after, the
    reductions tried and kept, the time it took."""

    requests: int
    requests_before: int
    pool_size: int
    pool_size_before: int
    tried: int
    kept: int
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "requests_before": self.requests_before,
            "pool_size": self.pool_size,
            "pool_size_before": self.pool_size_before,
            "tried": self.tried,
            "kept": self.kept,
            "seconds": self.seconds,
        }


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

    def files(self) -> dict[str, str]:
        """File name -> text: the scenario, and the test when there is one."""
        out = {"reproducer.toml": self.toml}
        if self.test_text is not None:
            out[self.test_name] = self.test_text
        return out

    def run_commands(self, where: str) -> list[str]:
        """How to run the emitted test: in SGLang's tree, and here against the wheel with
        and without the fix patched in (``tests/conformance/adder_fix.py``)."""
        if self.test_text is None:
            return []
        test = f"{where}/{self.test_name}"
        here = "PYTHONPATH=tests/conformance .venv-sglang/bin/python -m pytest -p adder_fix"
        return [
            f"python -m pytest {test}",
            f"{here} {test}  # fails: the code as it ran",
            f"KVF_ADDER_FIX=tail {here} {test}  # passes: the tail charged",
        ]

    def summary(self) -> Reduction:
        c, o = self.shrunk.case, self.shrunk.original
        return Reduction(
            requests=len(c.requests()),
            requests_before=len(o.requests()),
            pool_size=c.pool_size,
            pool_size_before=o.pool_size,
            tried=len(self.shrunk.tried),
            kept=sum(t.kept for t in self.shrunk.tried),
            seconds=round(self.shrunk.seconds, 3),
        )

    def story(self) -> list[str]:
        """The cause's chain in words, as the reproducer keeps it."""
        return limits.story(self.shrunk, self.fix)

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "target": self.target,
            "fix": self.fix,
            "cause": self.shrunk.chain.kind,
            "story": self.story(),
            "reduction": self.summary().as_dict(),
            "tests": [t.name for t in self.tests],
            "omitted": list(self.omitted),
            "keeps": list(self.keeps),
            "drops": list(self.drops),
            "files": list(self.files()),
        }

    def markdown(self, where: str) -> list[str]:
        """The report's section: the reproducer, its test and the command that runs it."""
        s = self.summary()
        ratio = s.pool_size_before / s.pool_size
        out = [
            "## Reproducer",
            "",
            f"`kvforensics reproduce` reduced the incident to {s.requests} request(s) on a "
            f"pool of {s.pool_size} slots (1/{ratio:.0f} of {s.pool_size_before}): "
            f"`{where}/reproducer.toml` (`kvforensics simulate {where}/reproducer.toml "
            f"--policy prefix,{self.fix}`).",
            "",
            *self.story(),
            "",
        ]
        if self.test_text is not None:
            out += [f"Regression test (target {self.target}): `{where}/{self.test_name}`, "
                    + ", ".join(f"`{t.name}`" for t in self.tests) + ". Run it:", "",
                    "```bash", *self.run_commands(where), "```", ""]  # fmt: skip
        out += [f"- {x}" for x in (*self.omitted, *self.keeps, *self.drops)]
        return [*out, ""]

    def write(self, out: Path) -> list[Path]:
        from kvforensics.outputs import atomic_write_text

        paths = []
        for name, text in self.files().items():
            paths.append(out / name)
            atomic_write_text(paths[-1], text)
        return paths


def case_from_replay(rr: ReplayResult, name: str | None = None) -> Case:
    """The replay's start state, when its cause is one ``reproduce`` reduces (named after
    the request that ran out of memory unless ``name`` is given)."""
    held = [c.id for c in rr.causes if c.held]
    if not rr.rebuild.oom or rr.builder is None:
        raise InputError("these logs show no out-of-memory to reproduce")
    if "unreserved_tail" not in held and "external_allocation" not in held:
        raise InputError(
            "reproduce reduces an unreserved tail or an outside allocation; the causes held "
            f"here are: {', '.join(held) or 'none'}"
        )
    return from_node(rr.builder.build(AS_RAN), name or f"repro-{rr.rebuild.oom.rid or 'oom'}")


def case_from_scenario(sc: Scenario, name: str) -> Case:
    return replace(from_scenario(sc), name=name)


def for_target(case: Case, target: str) -> Case:
    """The case under the target's rules: the fork's, or a release's, where the fork's
    checkpoint alignment becomes ``truncation_align_size`` (the release's own knob)."""
    if target not in TARGETS:
        raise InputError(f"unknown --target {target!r}; choose from {', '.join(TARGETS)}")
    if target == "fork":
        if case.profile != "fork":
            raise InputError(
                f"{case.name}: its profile is {case.profile}; --target fork needs the fork's"
            )
        return case
    align = case.size("truncation_align_size") or case.size("align_size")
    moved = case.with_sizes(align_size=0, truncation_align_size=align)
    return replace(moved, profile=target)


def make(
    case: Case, *, source: str, target: str = "fork", fix: str = "fixed", logs: bool = False
) -> Reproducer:
    """The reproducer of ``case`` (``logs``: it is a replay's start state, so what only the
    logs hold is among what it drops)."""
    if fix not in POLICIES or fix == AS_RAN:
        others = ", ".join(p for p in POLICIES if p != AS_RAN)
        raise InputError(f"unknown --policy {fix!r} for the fix; choose from {others}")
    start = for_target(case, target)
    if find_chain(start, fix) is None:
        raise InputError(
            f"{source}: under the {target} rules the incident's chain does not hold "
            f"({why_not(start, fix)}); no reproducer"
        )
    shrunk = Shrinker(start, fix).run()
    tests, omitted = _links(shrunk, fix, target)
    keeps, drops = limits.keeps(shrunk, fix), limits.drops(shrunk, logs)
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
        still = f"; under {fix} it runs out of memory too" if chain.fix_oom else ""
        return (), (
            f"the memory was taken outside the adder ({tokens} tokens{still}): no adder test "
            "can guard it, so none is emitted; the scenario alone reproduces it",
        )
    tests: list[LinkTest] = []
    omitted: list[str] = []
    first = chain_round(shrunk.case, chain, fix)
    if isinstance(first, LinkTest):
        tests.append(first)
    else:
        omitted.append(first)
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


def reproducer_for(
    inputs: list[Path], opts: ReplayOptions, *, target: str, fix: str
) -> Reproducer:
    """The reproducer of a scenario file or of logs (``opts``: how the logs are read, as
    given on the command line; they are replayed as ``replay`` does, streamed, over every
    round)."""
    if len(inputs) == 1 and inputs[0].suffix.lower() == ".toml":
        from kvforensics.scenario import load_scenario

        sc = load_scenario(inputs[0])
        return make(case_from_scenario(sc, f"{sc.name}-repro"), source=str(inputs[0]),
                    target=target, fix=fix)  # fmt: skip
    if any(p.suffix.lower() == ".toml" for p in inputs):
        raise InputError("reproduce takes one scenario TOML, or log files")
    from kvforensics.replay import replay_logs
    from kvforensics.replay.stock import NoAdderLines
    from kvforensics.rounds.stream import Narrow

    policies = (fix,) if fix in POLICIES else ()
    options = replace(opts, policies=policies, stream=True, narrow=Narrow())
    try:
        rr = replay_logs(inputs, options)
    except NoAdderLines as no:
        if not no.release:
            raise
        no.stock()  # what a release's log tells: its own error where it is no scheduler's
        raise InputError(
            "these logs have no PrefillAdder lines (an SGLang release's): the rounds cannot be "
            "rebuilt, so there is no state to reduce; `kvforensics replay` tells what they show"
        ) from None
    return make(case_from_replay(rr), source=", ".join(map(str, inputs)), target=target,
                fix=fix, logs=True)  # fmt: skip
