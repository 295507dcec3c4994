"""The node's sizes, read from startup lines; what is missing must come from flags."""

from __future__ import annotations

import polars as pl

from kvforensics.errors import MissingConfigError
from kvforensics.model import Config
from kvforensics.rounds.provenance import GIVEN, OBSERVED, Prov, where

#: config field -> (event kind, column) in the order they are looked for
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
    "align_size": [("checkpoint_align", "align_size")],
}
FLAGS = {
    "page_size": "--page-size",
    "chunked_prefill_size": "--chunk-size",
    "max_prefill_tokens": "--max-prefill-tokens",
    "pool_size": "--pool-size",
    "align_size": "--align",
}


def read_config(
    events: pl.DataFrame, overrides: dict[str, int | None]
) -> tuple[Config, dict[str, Prov]]:
    """Flags win over the log (a user fixing a wrong startup line); the log wins over nothing."""
    found: dict[str, Prov] = {}
    for name, sources in SOURCES.items():
        if overrides.get(name) is not None:
            found[name] = Prov(int(overrides[name]), GIVEN, [FLAGS[name]])
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
    if missing:
        raise MissingConfigError(
            "the log has no startup lines giving "
            + ", ".join(n.split("--")[1].replace("-", " ") for n in missing)
            + f"; pass {' '.join(f'{m} N' for m in missing)}"
        )
    cfg = Config(
        page_size=found["page_size"].value,
        chunked_prefill_size=found["chunked_prefill_size"].value,
        max_prefill_tokens=found["max_prefill_tokens"].value,
        pool_size=found["pool_size"].value,
        align_size=found["align_size"].value,
        max_new_tokens=1,
    )
    found["max_new_tokens"] = Prov(1, "inferred", ["prefill node: max_new_tokens is forced to 1"])
    return cfg, found
