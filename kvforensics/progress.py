"""Progress of a command's stages on stderr: one live display, one line per stage.

A stage counts what it has done (bytes read, rounds rebuilt, rounds checked, rounds run
under a policy, files written). The count is kept here and handed to rich only every
``every`` items, so a stage's cost in a loop of a million rounds is an addition and a
comparison per item. Disabled (``--no-progress``, or stderr not a terminal) nothing is
drawn and nothing is written: every stage is the same idle object.

A command opens the display around its work (``with Stages(console):``); the stages
deep in the pipeline find it with ``current()``, so progress is no parameter of the
library's functions. (A context variable: a thread that does not inherit the context,
such as a writer's, is handed the display explicitly.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Protocol, TypeVar

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

T = TypeVar("T")
R = TypeVar("R", covariant=True)

#: items between two updates of the display; a read counts in bytes
EVERY = 512
EVERY_BYTES = 1 << 20


class Stage:
    """One line of the display."""

    __slots__ = ("_bar", "_done", "_every", "_shown", "_task", "_total", "_unit")

    def __init__(self, bar: Progress, task: TaskID, every: int, unit: str, total: float | None) -> None:
        self._bar, self._task, self._every, self._unit = bar, task, every, unit
        self._total = total
        self._done = self._shown = 0

    def advance(self, n: int = 1) -> None:
        self._done += n
        if self._done - self._shown >= self._every:
            self._show()

    def to(self, done: int) -> None:
        """``done`` in all (a callback that counts for itself)."""
        self.advance(done - self._done)

    def iterate(self, items: Iterable[T]) -> Iterator[T]:
        """``items``, counted as they pass."""
        for item in items:
            yield item
            self.advance()

    def done(self) -> None:
        """The stage is over: its line shows the final count, its bar full."""
        self._shown = self._done
        full = max(self._done, 1)
        count = _count(self._done, self._unit, self._total)
        self._bar.update(self._task, total=full, completed=full, count=count)

    def _show(self) -> None:
        self._shown = self._done
        count = _count(self._done, self._unit, self._total)
        self._bar.update(self._task, completed=self._done, count=count)


class _Idle:
    """A stage of a disabled display: does nothing, costs a call."""

    __slots__ = ()

    def advance(self, n: int = 1) -> None:
        pass

    def to(self, done: int) -> None:
        pass

    def iterate(self, items: Iterable[T]) -> Iterable[T]:
        return items

    def done(self) -> None:
        pass


IDLE = _Idle()
#: a line of the display, or what stands for one in a disabled display
AnyStage = Stage | _Idle


class Stages:
    """The display for one command: ``with Stages(console) as st: read = st.stage(...)``.

    ``enabled`` defaults to whether ``console`` is a terminal (rich's test, so
    ``TTY_COMPATIBLE=1`` or ``FORCE_COLOR`` force it and ``TTY_COMPATIBLE=0`` stops it)."""

    def __init__(self, console: Console | None = None, enabled: bool | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.enabled = self.console.is_terminal if enabled is None else enabled
        self._bar: Progress | None = None
        self._scopes: list[list[TaskID]] = []
        if self.enabled:
            self._bar = Progress(
                TextColumn("{task.description:<16}"),
                BarColumn(bar_width=20),
                TextColumn("{task.fields[count]}"),
                TimeElapsedColumn(),
                console=self.console,
                transient=True,
                refresh_per_second=4,
            )

    @contextmanager
    def scope(self) -> Iterator[None]:
        """The stages opened inside leave the display when it ends (one node of many)."""
        if self._bar is None:
            yield
            return
        self._scopes.append([])
        try:
            yield
        finally:
            for task in self._scopes.pop():
                self._bar.remove_task(task)

    def __enter__(self) -> Stages:
        self._token = _CURRENT.set(self)
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
        _CURRENT.reset(self._token)

    def stage(self, name: str, total: float | None = None, unit: str = "") -> AnyStage:
        """A new line; ``unit`` ``"bytes"`` counts in MB (a read, against ``total``)."""
        if self._bar is None:
            return IDLE
        # a name is text, not markup: "exec incident [prefix]" keeps its policy
        task = self._bar.add_task(escape(name), total=total, count=_count(0, unit, total))
        if self._scopes:
            self._scopes[-1].append(task)
        every = EVERY_BYTES if unit == "bytes" else EVERY
        if total:  # a few hundred steps over the whole, each item shown when there are few
            every = max(1, min(every, int(total) // 256))
        return Stage(self._bar, task, every, unit, total)

    def counted(self, items: Iterable[T], name: str, unit: str = "") -> Iterable[T]:
        """``items`` counted in a stage that opens with the first of them, so it stands
        below the stages that making it opened (the read below which rounds come)."""
        return items if self._bar is None else self._counted(items, name, unit)

    def _counted(self, items: Iterable[T], name: str, unit: str) -> Iterator[T]:
        stage = None
        try:
            for item in items:
                stage = stage or self.stage(name, unit=unit)
                yield item
                stage.advance()
        finally:
            (stage or self.stage(name, unit=unit)).done()

    def reader(self, name: str, total: int) -> Callable[[int], None] | None:
        """A callback for the log reader (bytes read from disk), or None when disabled."""
        if self._bar is None:
            return None
        return self.stage(name, total, "bytes").advance


#: the display of a command run without one
NONE = Stages(Console(stderr=True), enabled=False)
_CURRENT: ContextVar[Stages] = ContextVar("kvforensics_progress", default=NONE)


def current() -> Stages:
    """The display the running command opened, else a disabled one."""
    return _CURRENT.get()


class Runnable(Protocol[R]):
    """A model node (``PrefillNode``): it runs rounds, calling back after each."""

    def run(
        self, max_rounds: int | None = None, on_round: Callable[[Any], None] | None = None
    ) -> R: ...


def run_shown(node: Runnable[R], name: str, max_rounds: int | None = None) -> R:
    """``node.run(max_rounds)`` (a ``PrefillNode``), its rounds a stage of the display."""
    runs = current().stage(name, unit="rounds")
    try:
        return node.run(max_rounds, on_round=lambda _n: runs.advance())
    finally:
        runs.done()


def _count(n: int, unit: str, total: float | None = None) -> str:
    if unit == "bytes":  # in MB, or in kB for a small log
        scale, name = (1e6, "MB") if (total or n) >= 1e6 else (1e3, "kB")
        return f"{n / scale:,.1f}" + (f" of {total / scale:,.1f}" if total else "") + f" {name}"
    return f"{n:,}" + (f" of {int(total):,}" if total else "") + f" {unit}".rstrip()
