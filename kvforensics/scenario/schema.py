"""The scenario file's schema: types, bounds and which keys exist, checked in one pass
before any model object is built, so a bad file is one line naming the field's path.

The relations between sizes stay with the model (``model.config.size_problems``); this
only says what each value may be on its own."""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Annotated, Any, get_type_hints

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from kvforensics.errors import InputError, validation_line
from kvforensics.model.config import MAX_TOKENS, SIZE_FIELDS, Config
from kvforensics.model.profiles import PROFILES

#: no request is longer than this (64 Mi tokens: several times the longest context any
#: model offers); a longer one is a typo, and would take the model millions of rounds
MAX_SEQ_LEN = 2**26
#: a scenario's clock and durations, in seconds: a year
MAX_SECONDS = 3.2e7
#: requests of one scenario (the Mooncake trace has 12,031)
MAX_REQUESTS = 200_000

Tokens = Annotated[int, Field(ge=0, le=MAX_TOKENS)]
Length = Annotated[int, Field(ge=0, le=MAX_SEQ_LEN)]
Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS)]
Rid = Annotated[str, Field(min_length=1, max_length=256)]


class _Strict(BaseModel):
    # strict: "abc" is not a number and 1.5 is not a token count; NaN and inf refused
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)


def _config_table() -> type[_Strict]:
    """The ``[config]`` table: ``model.Config``'s sizes and cache kind, typed and
    defaulted as the dataclass declares them (one home for the fields; ``Config`` is built
    from this table's values)."""
    hints = get_type_hints(Config)
    spec = {
        f.name: (hints[f.name], ... if f.default is MISSING else f.default)
        for f in fields(Config)
        if f.name in (*SIZE_FIELDS, "cache_kind")
    }
    # the fields are ``Config``'s, read at run time: no overload of create_model types them
    table: type[_Strict] = create_model("ConfigTable", __base__=_Strict, **spec)  # type: ignore[call-overload]
    return table


ConfigTable = _config_table()


class PoolTable(_Strict):
    free: Tokens | None = None
    evictable: Tokens = 0


class TimingTable(_Strict):
    round_overhead_s: Seconds = 0.0
    prefill_tokens_per_s: Annotated[float, Field(ge=0)] = 0.0
    transfer_latency_s: Seconds = 0.0
    transfer_tokens_per_s: Annotated[float, Field(ge=0)] = 0.0


class RequestTable(_Strict):
    rid: Rid
    seq_len: Annotated[int, Field(ge=1, le=MAX_SEQ_LEN)]
    prefix_len: Length = 0
    host_hit_len: Length = 0
    arrival: Seconds = 0.0
    prefix_evictable: bool = True

    @model_validator(mode="after")
    def _leaves_work(self) -> RequestTable:
        if self.prefix_len + self.host_hit_len >= self.seq_len:
            raise ValueError(
                f"{self.rid}: prefix_len + host_hit_len ({self.prefix_len + self.host_hit_len}) "
                f"must leave at least one token of seq_len {self.seq_len} to compute"
            )
        return self


class ChunkedTable(RequestTable):
    done: Length

    @model_validator(mode="after")
    def _done_inside(self) -> ChunkedTable:
        if not self.prefix_len <= self.done < self.seq_len:
            raise ValueError(
                f"{self.rid}: done {self.done} must lie in [prefix_len {self.prefix_len}, "
                f"seq_len {self.seq_len})"
            )
        return self


class InflightTable(_Strict):
    rid: Rid
    tokens: Tokens
    done_at: Seconds


class OutsideTable(_Strict):
    """Slots something outside the adder takes just before a round (held to the end)."""

    before_round: Annotated[int, Field(ge=0, le=MAX_TOKENS)]
    tokens: Tokens


class TraceTable(_Strict):
    file: Annotated[str, Field(min_length=1)]
    limit: Annotated[int, Field(ge=0, le=MAX_REQUESTS)] | None = None
    time_scale: Annotated[float, Field(gt=0, le=1e3)] = 0.001
    block_size: Annotated[int, Field(ge=1, le=MAX_SEQ_LEN)] = 512
    host_capacity: Tokens = 0
    rid_prefix: Annotated[str, Field(max_length=64)] = "mc-"


class ScenarioFile(_Strict):
    name: Annotated[str, Field(max_length=256)] | None = None
    description: str = ""
    first_round: Annotated[int, Field(ge=0, le=MAX_TOKENS)] = 0
    start_time: Seconds = 0.0
    profile: str = "fork"
    config: ConfigTable  # type: ignore[valid-type]  # a model made at run time (above)
    pool: PoolTable = PoolTable()
    timing: TimingTable = TimingTable()
    waiting: Annotated[list[RequestTable], Field(max_length=MAX_REQUESTS)] = []
    arrivals: Annotated[list[RequestTable], Field(max_length=MAX_REQUESTS)] = []
    inflight: Annotated[list[InflightTable], Field(max_length=MAX_REQUESTS)] = []
    chunked: ChunkedTable | None = None
    outside: Annotated[list[OutsideTable], Field(max_length=MAX_REQUESTS)] = []
    trace: TraceTable | None = None

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, v: str) -> str:
        if v not in PROFILES:
            raise ValueError(f"unknown profile {v!r}; choose from {', '.join(PROFILES)}")
        return v


def validate_scenario(data: dict[str, Any], name: str) -> ScenarioFile:
    """The scenario's tables, typed; one line naming the first bad field otherwise."""
    try:
        return ScenarioFile.model_validate(data)
    except ValidationError as exc:
        raise InputError(validation_line(exc, name, "fix the scenario file")) from None
