"""``replay --jobs N`` over byte ranges: the same bytes out for every N, whatever the cuts
land on (a chunked request mid-prefill, a warm-up too short to agree, a cut last line)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import kvforensics.replay.ranges as ranges
import kvforensics.replay.replay as replay_mod
from kvforensics.replay import ReplayOptions, replay_logs
from kvforensics.scan import whole_log, whole_log_dict
from tests.conftest import FIXTURES, ROOT

LOGS = FIXTURES / "logs"
POLICIES = ["fixed", "upstream", "drain", "park"]


def _json(path: Path, jobs: int, window: int = replay_mod.WINDOW) -> str:
    rr = replay_logs(
        [path], ReplayOptions(POLICIES, stream=True, whole_log=True, jobs=jobs, window=window)
    )
    d = rr.as_dict()
    d["whole_log"] = whole_log_dict(whole_log(rr))
    d["rounds_seen"], d["logged_seen"] = rr.rounds_seen, rr.logged_seen
    d["kept"] = [r.as_dict() for r in rr.rebuild.rounds]
    return json.dumps(d, default=str)


class Spy:
    """The joins ``replay`` made and used (None where it made the one pass instead: the
    join failed, or anything after it did, which the one pass would hide)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.joins: list[ranges.Joined | None] = []
        made: list[ranges.Joined] = []
        real_run, real_ranged = ranges.run_ranges, replay_mod._ranged

        def run(*a: object, **k: object) -> ranges.Joined:
            made.append(real_run(*a, **k))  # type: ignore[arg-type]
            return made[-1]

        def ranged(*a: object, **k: object) -> object:
            made.clear()
            try:
                got = real_ranged(*a, **k)  # type: ignore[arg-type]
            except Exception:
                self.joins.append(None)
                raise
            self.joins.append(made[-1])
            return got

        monkeypatch.setattr(replay_mod, "run_ranges", run)
        monkeypatch.setattr(replay_mod, "_ranged", ranged)


@pytest.fixture
def small_ranges(monkeypatch: pytest.MonkeyPatch) -> Spy:
    """Ranges of a few kilobytes with a short warm-up: cuts everywhere."""
    monkeypatch.setattr(ranges, "MIN_PART", 2 << 10)
    monkeypatch.setattr(ranges, "MARGIN", 24 << 10)
    monkeypatch.setattr(ranges, "LOOKAHEAD", 16 << 10)
    return Spy(monkeypatch)


@pytest.fixture(scope="module")
def large_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("large") / "pp0.log"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make_large_log.py"), str(out), "--mb", "1", "--trace-limit", "1000"],
        check=True, capture_output=True, cwd=ROOT,
    )  # fmt: skip
    return out


@pytest.fixture(scope="module")
def cut_log(large_log: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The large log cut off mid-line, as a crash leaves it."""
    data = large_log.read_bytes()
    out = tmp_path_factory.mktemp("cut") / "pp0.log"
    at = data.index(b"\n", len(data) * 2 // 3) + 40
    out.write_bytes(data[:at])
    return out


@pytest.mark.parametrize(
    "name",
    [
        "clean/pp0.log",
        "contradiction/pp0.log",
        "samples/incident-pp0.log",
        pytest.param("incident/pp0.log", marks=pytest.mark.slow),
    ],
)
def test_fixtures_give_the_same_output_for_every_n(name: str, small_ranges: Spy) -> None:
    path = LOGS / name
    one = _json(path, 1)
    for jobs in (2, 3, 5):
        assert _json(path, jobs) == one, f"--jobs {jobs}"
    if path.stat().st_size > 16 << 10:
        assert any(j is not None and len(j.results) > 1 for j in small_ranges.joins)


@pytest.mark.slow  # half a minute of the default run; CI's slow step runs it
def test_a_large_log_gives_the_same_output_for_every_n(large_log: Path, small_ranges: Spy) -> None:
    one = _json(large_log, 1)
    for jobs in (2, 3, 5):
        assert _json(large_log, jobs) == one, f"--jobs {jobs}"
    joined = [j for j in small_ranges.joins if j is not None]
    assert [len(j.results) for j in joined] == [2, 3, 5]
    # some cut fell while a request was being chunked: the warm-up rebuilt it
    heads = [r.head for j in joined for r in j.results[1:]]
    assert any(h is not None and h.state[0] is not None for h in heads)


@pytest.mark.slow  # half a minute of the default run; CI's slow step runs it
def test_rounds_the_join_does_not_keep_travel_light(large_log: Path, small_ranges: Spy) -> None:
    """With a short window most rounds go without their evidence: the output is the same."""
    one = _json(large_log, 1, window=40)
    for jobs in (2, 5):
        assert _json(large_log, jobs, window=40) == one, f"--jobs {jobs}"
    assert all(j is not None for j in small_ranges.joins)


def test_a_cut_log_gives_the_same_output(cut_log: Path, small_ranges: Spy) -> None:
    one = _json(cut_log, 1)
    assert '"cut_last_line": true' in one
    for jobs in (2, 5):
        assert _json(cut_log, jobs) == one, f"--jobs {jobs}"
    assert all(j is not None for j in small_ranges.joins)


def test_a_warm_up_too_short_is_widened(
    large_log: Path, small_ranges: Spy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A warm-up of a few lines cannot know the requests alive at the cut: the join sees
    the neighbours disagree and reads further back, never joining a different answer."""
    monkeypatch.setattr(ranges, "MARGIN", 300)
    assert _json(large_log, 3) == _json(large_log, 1)
    assert small_ranges.joins[0] is not None


def test_mid_chunk_cuts_are_where_the_warm_up_matters(large_log: Path) -> None:
    """A range whose cut falls while a request is mid-prefill inherits it from its
    warm-up: the state at its first round is the one the range before sees there."""
    from kvforensics.model.profiles import FORK

    opts = ranges.RangeOptions(overrides={}, rank=None, formats=None, profile=FORK, whole=False)
    owned = ranges.plan(large_log, 4)
    todo = ranges.parts(large_log, owned, opts, 64 << 10, 16 << 10)
    results = [ranges.run_part(p) for p in todo]
    for before, after, part in zip(results, results[1:], todo[1:], strict=False):
        assert ranges._agree(before, after, part)


def test_the_workers_rounds_go_through_the_disk_a_block_at_a_time(
    large_log: Path, small_ranges: Spy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory flat in the log's size: each worker writes its rounds out as it goes, the
    join reads them back a block at a time, and nothing is left on the disk after."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(ranges, "BLOCK", 64)
    one = _json(large_log, 1, window=40)
    seen: list[tuple[str, int, int]] = []
    real = ranges.Spilled.blocks

    def blocks(self: ranges.Spilled):  # type: ignore[no-untyped-def]
        assert self.path is not None and not self.frames
        for rows, sets in real(self):
            seen.append((self.path, len(rows), len(sets)))
            yield rows, sets

    monkeypatch.setattr(ranges.Spilled, "blocks", blocks)
    assert _json(large_log, 3, window=40) == one
    assert small_ranges.joins[-1] is not None
    files = {path for path, _, _ in seen}
    assert len(files) == 3
    assert max(n for _, n, _ in seen) == 64 and all(n == k for _, n, k in seen)
    # the rounds the join may keep went whole, the others without their evidence
    whole = [len(r.spilled.whole) for r in small_ranges.joins[-1].results if r.spilled]
    assert sum(whole) < sum(n for _, n, _ in seen)
    assert list(tmp_path.iterdir()) == []


def test_several_files_and_gzip_take_the_one_pass(tmp_path: Path) -> None:
    inc = LOGS / "incident"
    assert not ranges.rangeable([inc / "pp0.log", inc / "pp3.log"], 2)
    assert not ranges.rangeable([inc / "pp1.log.gz"], 2)
    assert not ranges.rangeable([inc / "pp0.log"], 1)
    assert ranges.rangeable([inc / "pp0.log"], 2)


def _cli(*args: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "kvforensics", *map(str, args)],
        capture_output=True, timeout=600, cwd=ROOT,
    )  # fmt: skip


def test_the_command_prints_the_same_bytes(large_log: Path) -> None:
    """Terminal text and JSON, with the default margins."""
    for fmt in ("table", "json"):
        one = _cli("replay", large_log, "--jobs", 1, "--format", fmt)
        two = _cli("replay", large_log, "--jobs", 3, "--format", fmt)
        assert one.returncode == two.returncode
        assert one.stdout == two.stdout


def test_rounds_o_writes_the_same_file(large_log: Path, tmp_path: Path) -> None:
    """``rounds -o`` over byte ranges: the same file and the same words."""
    got = {}
    for jobs in (1, 3):
        out = tmp_path / str(jobs) / "rounds.ndjson"
        out.parent.mkdir()
        r = _cli("rounds", large_log, "-o", out, "--jobs", jobs)
        assert r.returncode == 0, r.stderr
        # (a long temporary path may wrap at the terminal's width: lines joined first)
        said = r.stdout.replace(b"\n", b"").replace(str(out).encode(), b"OUT")
        got[jobs] = (out.read_bytes(), said)
    assert got[3] == got[1]


def test_scan_of_one_large_node_uses_the_ranges(
    large_log: Path, small_ranges: Spy, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvforensics.replay import checks
    from kvforensics.scan.records import NodeSpec
    from kvforensics.scan.task import ScanOptions, scan_node

    monkeypatch.setattr(checks, "REMOTE_BYTES", 1 << 20)
    spec = NodeSpec("node", (str(large_log),))
    one = scan_node(spec, ScanOptions(), jobs=1)
    assert small_ranges.joins == []
    assert scan_node(spec, ScanOptions(), jobs=3) == one
    assert len(small_ranges.joins) == 1 and small_ranges.joins[0] is not None
