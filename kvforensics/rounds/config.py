"""The node's sizes, read from startup lines; what is missing must come from flags."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from kvforensics.errors import InputError, MissingConfigError
from kvforensics.model import Config
from kvforensics.model.config import size_problems
from kvforensics.rounds.provenance import GIVEN, OBSERVED, Prov, where

#: config field -> (event kind, column) in the order they are looked for
#: the setting a rebuild reads back by name (its checkpoint alignment's evidence)
ALIGN_SIZE = "align_size"

SOURCES = {
    "page_size": [("server_args", "page_size")],
    "chunked_prefill_size": [
        ("memory_config", "chunked_prefill_size"),
        ("server_args", "chunked_prefill_size"),
    ],
    "max_prefill_tokens": [
        ("memory_config", "max_prefill_tokens"),
        ("server_args", "max_prefill_tokens"),
    ],
    "pool_size": [("memory_config", "max_total_num_tokens")],
    ALIGN_SIZE: [("checkpoint_align", "align_size")],
}
FLAGS = {
    "page_size": "--page-size",
    "chunked_prefill_size": "--chunk-size",
    "max_prefill_tokens": "--max-prefill-tokens",
    "pool_size": "--pool-size",
    ALIGN_SIZE: "--align",
}


def read_config(
    events: pl.DataFrame,
    overrides: dict[str, int | None],
    unreadable: Sequence[tuple[str, int, str]] = (),
) -> tuple[Config, dict[str, Prov]]:
    """Flags win over the log (a user fixing a wrong startup line); the log wins over nothing.

    ``unreadable`` (the reader's samples of lines it could not use) lets a missing size
    point at the startup line that held it."""
    found: dict[str, Prov] = {}
    for name, sources in SOURCES.items():
        given = overrides.get(name)
        if given is not None:
            found[name] = Prov(int(given), GIVEN, [FLAGS[name]])
            continue
        for kind, col in sources:
            if col not in events.columns:
                continue
            rows = events.filter((pl.col("kind") == kind) & pl.col(col).is_not_null())
            if rows.height:
                ev = rows.row(rows.height - 1, named=True)  # the last restart counts
                found[name] = Prov(int(ev[col]), OBSERVED, [where(ev)])
                break
    if "max_prefill_tokens" not in found and "chunked_prefill_size" in found:
        c = found["chunked_prefill_size"]
        found["max_prefill_tokens"] = Prov(
            c.value,
            "inferred",
            ["SGLang's default: max_prefill_tokens >= chunked_prefill_size; taken equal"],
        )
    no_startup = "page_size" not in found
    if "align_size" not in found and not no_startup:
        found["align_size"] = Prov(
            0, "inferred", ["no 'Prefill checkpoint end align size' line: no checkpoint alignment"]
        )
    needed = ("page_size", "align_size", "chunked_prefill_size", "pool_size")
    missing = [FLAGS[n] for n in needed if n not in found]
    bad = [_unreadable_source(n, unreadable) for n in needed if n not in found]
    if any(bad):
        raise InputError(f"{next(b for b in bad if b)}; pass {' '.join(f'{m} N' for m in missing)}")
    if missing:
        raise MissingConfigError(
            "the log has no startup lines giving "
            + ", ".join(n.split("--")[1].replace("-", " ") for n in missing)
            + f"; pass {' '.join(f'{m} N' for m in missing)}"
        )
    _check_sizes(found)
    _check_against_log(events, found)
    cfg = Config(
        page_size=_number(found["page_size"]),
        chunked_prefill_size=_number(found["chunked_prefill_size"]),
        max_prefill_tokens=_number(found["max_prefill_tokens"]),
        pool_size=_number(found["pool_size"]),
        align_size=_number(found["align_size"]),
        max_new_tokens=1,
    )
    found["max_new_tokens"] = Prov(1, "inferred", ["prefill node: max_new_tokens is forced to 1"])
    return cfg, found


def check_overrides(overrides: dict[str, int | None]) -> None:
    """The sizes given as flags, each on its own, before any log is read."""
    _check_sizes({n: Prov(v, GIVEN, [FLAGS[n]]) for n, v in overrides.items() if v is not None})


def _check_sizes(found: dict[str, Prov]) -> None:
    """Sizes the model cannot run with: one line naming the value, where it came from and
    the flag that sets it."""
    problems = size_problems({n: p.value for n, p in found.items()})
    if not problems:
        return
    name, why = problems[0]
    p = found[name]
    if p.provenance == GIVEN:
        raise InputError(f"{FLAGS[name]} {p.value} {why}; give another {FLAGS[name]}")
    raise InputError(
        f"{name} {p.value} ({', '.join(p.evidence)}) {why}; pass {FLAGS[name]} N to override it"
    )


#: (logged column, size it cannot exceed, why): the chunk budget starts each round at
#: chunked_prefill_size and only goes down; what the pool holds at once fits in the pool
BOUNDED_BY = (
    ("rem_chunk_tokens", "chunked_prefill_size", "the chunk budget never exceeds it"),
    ("baseline", "pool_size", "free + evictable slots fit in the pool"),
    ("prefix_len", "pool_size", "a device prefix is held in the pool"),
    ("loaded", "pool_size", "a load-back lands in the pool"),
    ("oom_available", "pool_size", "what an out-of-memory line counts left fits in the pool"),
    ("oom_available_size", "pool_size", "free slots fit in the pool"),
    ("oom_evictable_size", "pool_size", "evictable slots fit in the pool"),
)


def _check_against_log(events: pl.DataFrame, found: dict[str, Prov]) -> None:
    """A logged number above the size that bounds it refutes that size (and a size far
    below the log's would make the rebuild infer rounds the log never had)."""
    for col, name, why in BOUNDED_BY:
        size = found[name]
        if col not in events.columns:
            continue
        rows = events.filter(pl.col(col) > size.value)
        if not rows.height:
            continue
        ev = rows.row(0, named=True)
        said = f"{col}={ev[col]} ({where(ev)})"
        if size.provenance == GIVEN:
            raise InputError(
                f"{FLAGS[name]} {size.value} is below the log's {said}: {why}; "
                f"give the node's own {FLAGS[name].removeprefix('--')}"
            )
        raise InputError(
            f"{name} {size.value} ({', '.join(size.evidence)}) is below the log's {said}: "
            f"{why}; pass {FLAGS[name]} N with the node's own size"
        )


def _number(size: Prov) -> int:
    """A size read above (every one is a number: a flag's, a line's or a default)."""
    assert size.value is not None
    return size.value


def _unreadable_source(name: str, unreadable: Sequence[tuple[str, int, str]]) -> str | None:
    """The reader's note on a startup line that held this size, if it dropped one."""
    cols = {col for _, col in SOURCES[name]}
    for path, line, why in unreadable:
        if any(why.split(": ", 1)[-1].startswith(c) for c in cols):
            return f"{name}: {path}:{line} is unreadable ({why})"
    return None
