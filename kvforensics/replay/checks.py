"""The per-round re-runs of a replay: every rebuilt round re-run under ``prefix`` (the
fidelity check) and read off for the whole-log findings, in this process (``Checks``) or
in a second one while this one reads and rebuilds the log (``Remote``).

Both give the same records. The second process gets each round as a tuple of the numbers
the re-run reads (less than half of what pickling the round would cost, a third of the
bytes) and sends back, per batch, the requests a fix refused; the fidelity record and the
findings come at the end. The round objects never leave this process, so the forward runs
from a refusal's round use the round the rebuild made.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import queue
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Iterable
from operator import attrgetter
from pathlib import Path
from typing import IO, Any

from mypy_extensions import mypyc_attr

from kvforensics.errors import KvfError
from kvforensics.model import Config
from kvforensics.model.profiles import Profile
from kvforensics.replay.fidelity import Fidelity, FidelityCheck
from kvforensics.replay.state import Sizes
from kvforensics.replay.whole_log import (
    Findings,
    Replayed,
    WholeLog,
    WholeLogPass,
    complete,
    fix_policies,
    is_replayable,
)
from kvforensics.rounds import Round
from kvforensics.rounds.compact import pack_time, unpack_time
from kvforensics.rounds.provenance import Prov
from kvforensics.rounds.records import Decision, Piece

#: rounds sent to the second process at a time, and batches it may be behind by
BATCH, AHEAD = 256, 8
#: logs from this size on are replayed with a second process, where there is a second CPU
REMOTE_BYTES = 32 << 20

_DECISION = attrgetter(*Decision.__dataclass_fields__)
_PIECE = attrgetter("rid", "start", "end", "kind")


# the join's ``JoinedChecks`` (replay/ranges.py, interpreted) is a subclass
@mypyc_attr(allow_interpreted_subclasses=True)
class Checks:
    """The re-runs in this process. ``known``: the configuration and the live prompt
    lengths (``Known``); ``whole``: gather the whole-log findings too."""

    def __init__(self, known: Sizes, profile: Profile, whole: bool) -> None:
        self.fidelity = FidelityCheck(known, profile=profile)
        self.wholelog = WholeLogPass(known, profile) if whole else None

    def add(self, rnd: Round, lens: dict[str, int] | None = None, late: bool = False) -> None:
        """One round (``lens``: its resumed chunk's prompt length, which the live lengths
        already hold here). A ``late`` round, one another rank's lines added after the
        stream, counts for the findings only."""
        run = self.wholelog.add(rnd) if self.wholelog is not None else None
        if not late:
            self.fidelity.add(rnd, run.steps if run is not None else None)

    def settle(self, upto: int | None = None) -> None:
        """Every round up to ``upto`` (all when None) checked: nothing waits here."""

    def refused_in(self, index: int) -> bool:
        return self.wholelog is not None and index in self.wholelog.refused_rounds

    def pinned(self) -> list[Round]:
        return self.wholelog.pinned() if self.wholelog is not None else []

    def result(self) -> Fidelity:
        return self.fidelity.result()

    def finish(self, rr: Replayed, per_round: float) -> WholeLog | None:
        """The whole-log findings (None when not gathered); ``rr``: the replay."""
        return self.wholelog.finish(rr, per_round) if self.wholelog is not None else None

    def close(self) -> None:
        """Nothing to stop."""


def pack_round(rnd: Round, lens: dict[str, int], late: bool) -> tuple[Any, ...]:
    """What a re-run of ``rnd`` reads, as plain values (``unpack_round`` gives it back)."""
    base = rnd.baseline.value if rnd.baseline is not None else None
    lock = rnd.first_lock.value if rnd.first_lock is not None else None
    return (
        rnd.index, pack_time(rnd.time), rnd.baseline is not None, base,
        [_DECISION(d) for d in rnd.decisions], [_PIECE(p) for p in rnd.pieces],
        lens, late, lock,
    )  # fmt: skip


def unpack_round(row: tuple[Any, ...]) -> tuple[Round, dict[str, int], bool]:
    index, t, has_base, base, decisions, pieces, lens, late, lock = row
    rnd = Round(
        index, unpack_time(t), [Decision(*d) for d in decisions],
        [Piece(rid, start, end, kind, "") for rid, start, end, kind in pieces],
        baseline=Prov(base, "") if has_base else None,
        first_lock=Prov(lock, "") if lock is not None else None,
    )  # fmt: skip
    return rnd, lens, late


class Remote:
    """The re-runs in a second process, fed as the rounds stream by; the same interface
    as ``Checks``. At most ``AHEAD`` batches are in flight, so the rounds held for them
    (the refusals' rounds are looked up here) stay a few thousand.

    ``link``: the second process, started early (``start``). One that stops before it
    says it is ready is replaced by the same work in this process (``Here``), the batches
    sent so far given again; one that stops later is an error."""

    def __init__(self, link: Pipes, cfg: Config, profile: Profile, whole: bool) -> None:
        self._link: Pipes | Here = link
        self._hello = (cfg, profile, whole)
        self._unready: list[list[tuple[Any, ...]]] | None = []  # batches sent before it was ready
        self._put(self._hello)
        self.whole = whole
        self.refused: dict[str, list[tuple[Round, str]]] = {p: [] for p in fix_policies()}
        self.refused_rounds: set[int] = set()
        self._batch: list[tuple[Any, ...]] = []
        self._held: dict[int, Round] = {}  # the rounds of the batch being filled
        #: per batch in flight: its first round's index and its rounds by index
        self._sent: deque[tuple[int, dict[int, Round]]] = deque()
        self._end: tuple[Fidelity, Findings | None] | None = None

    def add(self, rnd: Round, lens: dict[str, int] | None = None, late: bool = False) -> None:
        if not (is_replayable(rnd) and self.whole) and not (rnd.decisions and not late):
            return  # neither check re-runs it
        self._batch.append(pack_round(rnd, lens or {}, late))
        self._held[rnd.index] = rnd
        if len(self._batch) >= BATCH:
            self._send()

    def _send(self) -> None:
        first = self._batch[0][0]
        if self._unready is not None:
            self._unready.append(self._batch)
        self._put(self._batch)
        self._sent.append((first, self._held))
        self._batch, self._held = [], {}
        while len(self._sent) > AHEAD:
            self._receive()

    def _receive(self) -> None:
        got = self._get()
        _, rounds = self._sent.popleft()
        for index, policy, rid in got:
            self.refused[policy].append((rounds[index], rid))
            self.refused_rounds.add(index)

    def _put(self, obj: object) -> None:
        try:
            self._link.put(obj)
        except Gone:
            self._here()

    def _get(self) -> Any:
        """The next answer (what the second process pickled)."""
        while True:
            try:
                got = self._link.get()
            except Gone:
                self._here()
                continue
            if isinstance(got, Failed):
                raise got.exc
            if self._unready is not None and got == READY:
                self._unready = None  # from here on, a stop is an error
                continue
            return got

    def _here(self) -> None:
        """The second process stopped: before it was ready, its work goes on here."""
        assert isinstance(self._link, Pipes)  # only the second process's pipes break
        if self._unready is None:
            raise self._link.stopped()
        self._link.close()
        self._link = Here()
        for obj in (self._hello, *self._unready):
            self._link.put(obj)
        self._unready = None
        self._link.get()  # ready

    def settle(self, upto: int | None = None) -> None:
        """Wait until every round up to ``upto`` (all when None) is checked."""
        if self._batch and (upto is None or self._batch[0][0] <= upto):
            self._send()
        while self._sent and (upto is None or self._sent[0][0] <= upto):
            self._receive()

    def refused_in(self, index: int) -> bool:
        return index in self.refused_rounds

    def pinned(self) -> list[Round]:
        return [rnd for refused in self.refused.values() for rnd, _ in refused]

    def _ended(self) -> tuple[Fidelity, Findings | None]:
        """The fidelity record and the findings, once every round sent is checked."""
        if self._end is None:
            self.settle()
            self._put(None)
            self._end = self._get()
            self.close()
        return self._end

    def result(self) -> Fidelity:
        return self._ended()[0]

    def finish(self, rr: Replayed, per_round: float) -> WholeLog | None:
        found: Findings | None = self._ended()[1]
        return complete(rr, found, self.refused, per_round) if found is not None else None

    def close(self) -> None:
        self._link.close()


#: the second process's first answer, once it has what it needs
READY = "ready"


class Gone(Exception):
    """The second process's pipes broke: it stopped."""


class Pipes:
    """The second process, on its standard input and output. A fresh interpreter, not
    multiprocessing: fork would copy the reader's running threads, and spawn runs the
    caller's main module again."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kvforensics.replay._checker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_env(),
        )  # fmt: skip

    def put(self, obj: object) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None  # both piped
        try:
            pickle.dump(obj, self.proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self.proc.stdin.flush()
        except (OSError, ValueError):  # a broken pipe, or one already closed
            raise Gone from None

    def get(self) -> Any:
        assert self.proc.stdout is not None  # piped
        try:
            return pickle.load(self.proc.stdout)
        except (EOFError, OSError, ValueError, pickle.UnpicklingError):
            raise Gone from None

    def stopped(self) -> KvfError:
        try:
            code = self.proc.wait(5)
        except subprocess.TimeoutExpired:
            code = None
        return KvfError(
            f"the second process re-running the rounds stopped (exit code {code}); "
            "run again with --jobs 1"
        )

    def close(self) -> None:
        """Stop it (it exits by itself once its input ends)."""
        for f in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):  # a pipe the second process broke
                if f is not None:
                    f.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start(jobs: int) -> Pipes | None:
    """The second process for ``jobs`` 2, started before the logs are read so that its
    start overlaps the first reads; None for 1, or where none can be started."""
    if jobs < 2:
        return None
    try:
        return Pipes()
    except OSError:  # no interpreter to start, or no processes left: the work stays here
        return None


def _env() -> dict[str, str]:
    """This environment, with the folder this package was imported from first on the
    path (a source tree need not be installed)."""
    root = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}


# compiled, a plain class: pickle makes a native one by calling __init__ with no arguments
@mypyc_attr(native_class=False)
class Failed:
    """An exception the second process raised, to raise again here."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class Here:
    """The second process's side: the sizes, then batches of packed rounds and their
    refusals, then None and the fidelity record and the findings. ``serve`` runs it in
    the second process; ``Remote`` runs it in this one when that process stopped early."""

    def __init__(self) -> None:
        self._checks: Checks | None = None
        self._known: Known | None = None
        self._answers: deque[Any] = deque()

    def answer(self, obj: Any) -> Any:
        """What the parent sent (unpickled): the sizes, a batch, or None at the end."""
        if self._checks is None:  # the sizes first
            cfg, profile, whole = obj
            self._known = Known(cfg, {})
            self._checks = Checks(self._known, profile, whole)
            return READY
        if obj is None:
            wl = self._checks.wholelog
            return self._checks.result(), wl.findings() if wl is not None else None
        assert self._known is not None  # set with the checks
        return _check(self._checks, self._known, obj)

    def put(self, obj: object) -> None:
        self._answers.append(self.answer(obj))

    def get(self) -> Any:
        return self._answers.popleft()

    def close(self) -> None:
        """Nothing to stop."""


def serve(inp: IO[bytes], out: IO[bytes]) -> None:
    """The second process: ``Here`` on its standard input and output."""
    from kvforensics.collector import fewer_collections

    def put(obj: object) -> None:
        pickle.dump(obj, out, protocol=pickle.HIGHEST_PROTOCOL)
        out.flush()

    # A batch is larger than the pipe holds: read ahead in a thread, so that the parent's
    # write returns while this process re-runs the batch before (up to ``AHEAD`` batches).
    inbox: queue.Queue[Any] = queue.Queue(maxsize=AHEAD)
    threading.Thread(target=_read_ahead, args=(inp, inbox), daemon=True).start()
    here = Here()
    try:
        with fewer_collections():
            while True:
                got = inbox.get()
                if isinstance(got, BaseException):
                    raise got
                put(here.answer(got))
                if got is None:
                    return
    except (EOFError, BrokenPipeError):
        pass  # the parent went away
    except Exception as exc:  # raised again in the parent
        try:
            put(Failed(exc))
        except (pickle.PicklingError, TypeError, AttributeError):
            put(Failed(RuntimeError(f"{type(exc).__name__}: {exc}")))


def _read_ahead(inp: IO[bytes], inbox: queue.Queue[Any]) -> None:
    """What the parent sends, one object at a time, until None or the end of the pipe
    (then the exception that ended it)."""
    while True:
        try:
            got = pickle.load(inp)
        except BaseException as exc:  # EOFError when the parent went away
            inbox.put(exc)
            return
        inbox.put(got)
        if got is None:
            return


def _check(checks: Checks, known: Known, batch: list[tuple[Any, ...]]) -> list[tuple[int, str, str]]:
    """One batch re-run; the refusals it found as (round, policy, request)."""
    for row in batch:
        rnd, lens, late = unpack_round(row)
        known.seq_lens = lens
        checks.add(rnd, late=late)
    wl = checks.wholelog
    if wl is None:
        return []
    out = [(rnd.index, p, rid) for p, got in wl.refused.items() for rnd, rid in got]
    for got in wl.refused.values():
        got.clear()
    wl.refused_rounds.clear()
    return out


class Known:
    """What a model node at a round needs besides the round: the sizes and prompt lengths."""

    def __init__(self, cfg: Config, seq_lens: dict[str, int]) -> None:
        self.cfg, self.seq_lens = cfg, seq_lens


def make_checks(
    known: Sizes, profile: Profile, whole: bool, link: Pipes | None = None
) -> Checks | Remote:
    """``link``: a second process (``start``) to run the re-runs in; else here."""
    if link is not None:
        return Remote(link, known.cfg, profile, whole)
    return Checks(known, profile, whole)


def default_jobs(paths: Iterable[str | Path]) -> int:
    """2 for logs of ``REMOTE_BYTES`` or more on a machine with two CPUs or more, else 1."""
    if (os.cpu_count() or 1) < 2:
        return 1
    size = 0
    for p in paths:
        try:
            size += os.path.getsize(p)
        except OSError:
            return 1
    return 2 if size >= REMOTE_BYTES else 1
