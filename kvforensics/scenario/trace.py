"""Work from a Mooncake request trace: arrivals, lengths and block hashes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvforensics.errors import InputError
from kvforensics.model import (
    Config,
    PagePool,
    PrefillNode,
    Request,
    get_policy,
    get_profile,
)
from kvforensics.model.prefix_cache import BlockPrefixCache, RadixPrefixCache
from kvforensics.model.radix import RadixPagePool
from kvforensics.scenario.schema import MAX_REQUESTS, MAX_SECONDS, MAX_SEQ_LEN
from kvforensics.scenario.spec import Scenario


class _TraceLine(BaseModel):
    """One JSONL row as the trace writes it (other keys, e.g. output_length, are ignored)."""

    model_config = ConfigDict(strict=True, allow_inf_nan=False)
    timestamp: Annotated[float, Field(ge=0, le=MAX_SECONDS * 1000)]
    input_length: Annotated[int, Field(ge=1, le=MAX_SEQ_LEN)]
    hash_ids: Annotated[list[int], Field(max_length=MAX_SEQ_LEN)]


@dataclass
class TraceRow:
    arrival: float
    input_length: int
    hash_ids: tuple[int, ...]


def read_trace(
    path: Path, *, limit: int | None = None, time_scale: float = 0.001
) -> list[TraceRow]:
    """Rows of a Mooncake JSONL trace; ``time_scale`` turns its ms timestamps into seconds."""
    rows: list[TraceRow] = []
    n = 0
    try:
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                n += 1
                if limit is not None and len(rows) >= limit:
                    break
                if not line.strip():
                    continue
                obj = _TraceLine.model_validate_json(line)
                rows.append(
                    TraceRow(obj.timestamp * time_scale, obj.input_length, tuple(obj.hash_ids))
                )
                if len(rows) > MAX_REQUESTS:
                    raise InputError(
                        f"{path}: more than {MAX_REQUESTS} requests; set [trace] limit"
                    )
    except FileNotFoundError:
        raise InputError(f"{path}: no such trace file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory; [trace] file names a JSONL trace") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}:{n + 1}: not UTF-8 text; not a Mooncake JSONL trace") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except ValidationError as exc:
        e = exc.errors(include_url=False)[0]
        field = ".".join(str(x) for x in e["loc"]) or "row"
        raise InputError(f"{path}:{n}: not a Mooncake trace row ({field}: {e['msg']})") from None
    return rows


@dataclass
class TraceWorkload:
    rows: list[TraceRow]
    block_size: int = 512
    host_capacity: int = 0
    rid_prefix: str = "mc-"

    @classmethod
    def from_table(cls, table: dict[str, Any], *, base: Path | None, cfg: Config) -> TraceWorkload:
        if "file" not in table:
            raise InputError("[trace] needs file = path of a Mooncake JSONL trace")
        path = Path(table["file"])
        if not path.is_absolute() and base is not None:
            path = base / path
        rows = read_trace(
            path, limit=table.get("limit"), time_scale=float(table.get("time_scale", 0.001))
        )
        return cls(
            rows,
            int(table.get("block_size", 512)),
            int(table.get("host_capacity", 0)),
            str(table.get("rid_prefix", "mc-")),
        )

    def works(self) -> list[int]:
        """The tokens each request computes (its whole input: no prefix is known before)."""
        return [row.input_length for row in self.rows]

    def build_node(
        self, sc: Scenario, policy: str, *, record: bool = True, record_ops: bool = False
    ) -> PrefillNode:
        # Pool operations (for `exec`) are many per block on long traces: opt-in.
        cfg = sc.cfg
        pool, cache = self._cache(sc, record=record and record_ops)
        arrivals = []
        for i, row in enumerate(self.rows):
            rid = f"{self.rid_prefix}{i:06d}"
            cache.add(rid, row.hash_ids)
            arrivals.append(Request(rid, row.input_length, arrival=row.arrival))
        return PrefillNode(
            cfg,
            get_policy(policy),
            pool,
            arrivals=arrivals,
            timing=sc.timing,
            profile=get_profile(sc.profile),
            first_round=sc.first_round,
            start_time=sc.start_time,
            record=record,
            prefix_cache=cache,
        )

    def _cache(self, sc: Scenario, *, record: bool) -> tuple[PagePool, Any]:
        """The pool and where prefix hits come from. A radix cache with no host tier is
        SGLang's ``RadixCache`` (a radix tree: prefixes published at every checkpoint,
        whole leaves evicted); with a host tier, or a hybrid pool, block entries."""
        cfg = sc.cfg
        if cfg.cache_kind == "radix" and not self.host_capacity:
            radix = RadixPagePool(page_size=cfg.page_size, size=cfg.pool_size, free=sc.free,
                                  evictable=sc.evictable, record=record)  # fmt: skip
            return radix, RadixPrefixCache(cfg, radix, block_size=self.block_size)
        pool = PagePool(
            page_size=cfg.page_size,
            size=cfg.pool_size,
            free=sc.free,
            evictable={"cache": sc.evictable} if sc.evictable else None,
            cache_kind=cfg.cache_kind,
            record=record,
        )
        return pool, BlockPrefixCache(
            cfg, block_size=self.block_size, host_capacity=self.host_capacity
        )
