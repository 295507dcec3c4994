"""The shape of a user's ``--formats`` file, checked in one pass before any entry is
built, so a setting of the wrong type is one line naming its path (``format[2].fields.rid``)
instead of an error deep in the reader. What the settings mean (regex groups, types,
clashes with base columns) stays with ``catalogue``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from kvforensics.errors import InputError, validation_line


class _Strict(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class _Sample(_Strict):
    line: str
    expect: dict[str, Any] = {}


class _Field(_Strict):
    type: str
    group: str | None = None
    # (pydantic leaves a default unchecked: the empty tuple reads as none given)
    keys: str | list[str] = ()  # type: ignore[assignment]
    regex: str | list[str] = ()  # type: ignore[assignment]


class _Pairs(_Strict):
    group: str
    sep: str = ", "
    assign: str = ": "
    extra: bool = False


class _Promote(_Strict):
    format: str
    when: str


class _Format(_Strict):
    name: str
    regex: str
    literal: str | None = None
    fields: dict[str, str | _Field] = {}
    pairs: _Pairs | None = None
    multiline: bool = False
    absorb: list[str] = []
    samples: list[_Sample] = []
    kind: str | None = None
    needs_prefix: bool = False
    nested: str | None = None
    promote: _Promote | None = None


class _Prefix(_Strict):
    regex: str
    tags: dict[str, str] | None = None
    samples: list[_Sample] = []
    time_format: str | None = None
    continues: str | None = None


class _Catalogue(_Strict):
    format: list[_Format] = []
    prefix: _Prefix | None = None


def check_catalogue_shape(doc: dict[str, Any], source: str) -> None:
    """Unknown settings are left to ``catalogue`` (it names them); wrong types stop here."""
    try:
        _Catalogue.model_validate(doc)
    except ValidationError as exc:
        raise InputError(validation_line(exc, source, "fix the formats file")) from None
