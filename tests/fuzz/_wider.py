"""Damage past tests/fuzz/_hostile.py: rids reused or all one, two ranks' files joined,
lines wrapped by a container runtime, long values at scale, odd file kinds (a symlink
loop, a fifo, a directory, an empty or unreadable file), ledgers whose columns went
missing, extra or retyped, and a user's ``--formats`` file with every field type and
every form a sample's expectation takes.

Applied last, from the same ``random.Random``, so the cases drawn before it are those
earlier campaigns ran (``scripts/fuzz.py --no-wide``)."""

from __future__ import annotations

import csv
import io
import os
import random
import re
from pathlib import Path

from tests.conftest import FIXTURES

INCIDENT_PP0 = FIXTURES / "logs" / "incident" / "pp0.log"
PP3 = FIXTURES / "logs" / "samples" / "incident-pp3.log"
PP1 = FIXTURES / "logs" / "samples" / "incident-pp1.log"
_RID = re.compile(rb"(?<=rid=)[^,\s\]]+|as-[a-z0-9]{10}")
_LINE_TIME = re.compile(rb"^\[(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d)")
LOG_COMMANDS = {"rounds", "replay", "diff", "explain", "report", "scan", "exec", "parse"}
#: the most a drawn input grows to (the incident's cut at 128 KiB with 100,000-character
#: rids is ~90 MB): the runs test the commands, not the machine's disk and memory
MAX_BYTES = 96 << 20
#: the most rows a damaged ledger CSV is given (a thousand copies of the incident's)
MAX_ROWS = 50_000


def widen(case, rng: random.Random, tmp: Path) -> None:
    """Make ``case`` (written into ``tmp``) worse in the ways above, in place."""
    logs = [p for p in case.inputs if p.suffix == ".log"]
    for p in logs:
        if rng.random() < 0.5:
            _damage(rng, p)
    if logs and case.argv[0] in LOG_COMMANDS and rng.random() < 0.08:
        case.argv += ["--formats", str(user_formats(rng, tmp))]
    for p in case.inputs:
        if p.suffix == ".csv" and rng.random() < 0.6:
            p.write_text(damage_ledger_csv(rng, p.read_text()))
    if case.inputs and rng.random() < 0.05:
        _odd_kind(rng, case, tmp)


# -- logs ------------------------------------------------------------------------------


def _damage(rng: random.Random, path: Path) -> None:
    data = path.read_bytes()
    how = rng.choice(["one_rid", "reused", "ranks", "wrapped", "long_at_scale", "crlf_mix"])
    if how == "one_rid":
        data = one_rid(data, rng.choice([b"as-same", b"r" * _rid_length(rng, data)]))
    elif how == "reused":
        pool = [b"as-%d" % i for i in range(rng.choice([1, 2, 3]))]
        data = _RID.sub(lambda m: rng.choice(pool), data)
    elif how == "ranks":
        data = two_ranks(rng, data)
    elif how == "wrapped":
        data = wrapped(rng, data)
    elif how == "long_at_scale":
        data = long_at_scale(rng)
    else:
        lines = data.split(b"\n")
        data = b"".join(ln + (b"\r\n" if rng.random() < 0.5 else b"\n") for ln in lines)
    path.write_bytes(data)


def _rid_length(rng: random.Random, data: bytes) -> int:
    """300 or 100,000 characters, the long one only while the log stays under
    ``MAX_BYTES`` (a log with rounds repeated 300 times would pass gigabytes)."""
    n = len(_RID.findall(data))
    return 100_000 if rng.random() < 0.5 and n * 100_000 <= MAX_BYTES else 300


def one_rid(data: bytes, rid: bytes) -> bytes:
    """Every rid the same one (a client reusing its request ids)."""
    return _RID.sub(lambda m: rid, data)


def two_ranks(rng: random.Random, data: bytes) -> bytes:
    """Another rank's file joined to this one, before or after it, or line by line."""
    other = rng.choice([PP3, PP1]).read_bytes()
    if rng.random() < 0.3:
        a, b = data.split(b"\n"), other.split(b"\n")
        out = [x for pair in zip(a, b, strict=False) for x in pair]
        return b"\n".join(out + a[len(b):] + b[len(a):])
    return data + other if rng.random() < 0.5 else other + data


def wrapped(rng: random.Random, data: bytes) -> bytes:
    """Each line as a container runtime prints it: docker compose's ``svc  | `` prefix,
    or the container's ISO timestamp before the line (the line's own time in it)."""
    if rng.random() < 0.5:
        pad = rng.choice([b"sglang-prefill-1  | ", b"svc | ", b"\x1b[36msvc\x1b[0m  | "])
        return b"\n".join(pad + ln if ln else ln for ln in data.split(b"\n"))

    def stamp(ln: bytes) -> bytes:
        m = _LINE_TIME.match(ln)
        when = m[1] + b"T" + m[2] if m else b"2026-11-02T15:16:26"
        return when + b".123456789Z " + ln if ln else ln

    return b"\n".join(stamp(ln) for ln in data.split(b"\n"))


def long_at_scale(rng: random.Random) -> bytes:
    """The incident's PP0 log cut near 128 KiB, its rids 100,000 characters long: one
    rid shared by all, or each its own (a few MB to ~90 MB)."""
    with INCIDENT_PP0.open("rb") as f:
        data = f.read(rng.choice([16, 64, 128]) << 10)
    data = data[: data.rfind(b"\n") + 1]
    if rng.random() < 0.5:
        return one_rid(data, b"q" * 100_000)
    seen: dict[bytes, bytes] = {}
    return _RID.sub(lambda m: seen.setdefault(m[0], b"%07d" % len(seen) + b"q" * 99_993), data)


# -- odd file kinds ----------------------------------------------------------------------


def _odd_kind(rng: random.Random, case, tmp: Path) -> None:
    """An input that is a symlink loop, a fifo, a directory, an empty or unreadable file."""
    how = rng.choice(["loop", "fifo", "dir", "empty", "unreadable"])
    suffix = case.inputs[0].suffix
    path = tmp / f"odd-{how}{suffix}"
    if how == "loop":
        other = tmp / f"odd-loop2{suffix}"
        path.symlink_to(other)
        other.symlink_to(path)
    elif how == "fifo":
        os.mkfifo(path)
    elif how == "dir":
        path.mkdir()
    else:
        path.write_bytes(b"" if how == "empty" else case.inputs[0].read_bytes())
        if how == "unreadable":
            path.chmod(0)
    i = case.argv.index(str(case.inputs[0]))
    case.argv[i if rng.random() < 0.5 else i + 1 : i + 1] = [str(path)]


# -- ledgers -------------------------------------------------------------------------------


def damage_ledger_csv(rng: random.Random, text: str) -> str:
    """A ledger CSV whose header lost a name, or gained a column, or a column retyped
    (numbers as floats or words, booleans spelled otherwise, a column blank for the rows
    polars infers types from); rows repeated, sometimes a thousand times."""
    rows = list(csv.reader(io.StringIO(text)))
    if len(rows) < 2:
        return text
    header, body = rows[0], rows[1:]
    how = rng.choice(["lost_name", "extra", "retype", "retype", "late_typed"])
    j = rng.randrange(len(header))
    if how == "lost_name":
        header = header[:j] + header[j + 1 :]
    elif how == "extra":
        header = [*header, rng.choice(["note", "forced", "", "policy"])]
        body = [[*r, rng.choice(["1", "x", ""])] for r in body]
    elif how == "retype":
        spell = rng.choice([lambda v: v + ".0", lambda v: "yes" if v == "true" else v,
                            lambda v: v.upper(), lambda v: "1e3", lambda v: " " + v])  # fmt: skip
        body = [[*r[:j], spell(r[j]), *r[j + 1:]] if j < len(r) else r for r in body]
    else:
        blank = [[*r[:j], "", *r[j + 1:]] for r in body]
        body = blank * rng.choice([5, 50]) + body
    body = body * min(rng.choice([1, 1, 2, 1000]), max(MAX_ROWS // len(body), 1))
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows([header, *body])
    return out.getvalue()


# -- a user's formats file ---------------------------------------------------------------

_TIMES = ['"2026-11-02 15:16:26"', '"2026-11-02 15:16:26.000"', "2026-11-02 15:16:26",
          '"2026-11-02T15:16:26"', '"yesterday"', "2026-11-02", "15", '""']  # fmt: skip
_VALUES = {
    "int": ["12", '"12"', "12.0", str(2**70), "-1", "true"],
    "float": ["1.5", "1", '"1.5"', "nan", "inf", "1e999"],
    "bool": ["true", "false", '"true"', "1", '"yes"'],
    "str": ['"a"', "1", '""', '"' + "s" * 3000 + '"', "[1]"],
    "list": ['["a", "b"]', '"a,b"', "[]", "[1, 2]", '"a"'],
}
_TEXT = {"int": "12", "float": "1.5", "bool": "true", "str": "a", "list": "a,b"}


def user_formats(rng: random.Random, tmp: Path) -> Path:
    """A ``--formats`` file: a format with one field of each type, whose sample expects
    values written in any form, and a prefix whose sample expects a time in any form."""
    types = list(_VALUES)
    fields = ", ".join(f"f_{t} = '{rng.choice([t, t, 'str', 'bogus'])}'" for t in types)
    groups = " ".join(f"{t}=(?P<f_{t}>\\S+)" for t in types)
    line = " ".join(f"{t}={_TEXT[t]}" for t in types)
    expect = [f"f_{t} = {rng.choice(_VALUES[t])}" for t in types if rng.random() < 0.8]
    if rng.random() < 0.3:
        expect.append(f"time = {rng.choice(_TIMES)}")
    prefix = ""
    if rng.random() < 0.5:
        stamp = rng.choice(["2026-11-02 15:16:26", "2026-11-02 15:16:26.250"])
        prefix = (
            "[prefix]\n"
            "regex = '^(?P<time>\\d{4}-\\d{2}-\\d{2} \\d{2}:\\d{2}:\\d{2}(?:\\.\\d+)?) '\n"
            "[[prefix.samples]]\n"
            f'line = "{stamp} x"\n'
            f"expect = {{ time = {rng.choice(_TIMES)} }}\n"
        )
    text = (
        f"{prefix}[[format]]\nname = 'typed'\nliteral = 'typed:'\n"
        f"regex = '^typed: {groups}'\nfields = {{ {fields} }}\n"
        f"[[format.samples]]\nline = '[2026-11-02 15:16:26 PP0] typed: {line}'\n"
        f"expect = {{ {', '.join(expect)} }}\n"
    )
    path = tmp / "user-formats.toml"
    path.write_text(text)
    return path
