"""Hostility on top of a drawn case (tests/fuzz/_cases.py): stock and other logs, damage
the first mutations do not make (huge lines, repeated rounds, line endings, times, rank
tags), special input paths, every command's remaining flags at their extremes, a
damaged format catalogue, relative and odd output paths, the trace-driven scenario with
a damaged trace, and byte damage in binary ledgers.

Applied after the case is drawn, from the same ``random.Random``, so a case drawn
without it (``harden=False``) is the one an earlier campaign ran."""

from __future__ import annotations

import gzip
import random
import re
from pathlib import Path

from tests.conftest import FIXTURES

OTHER_LOGS = [
    *sorted((FIXTURES / "logs" / "stock").glob("*.log")),
    FIXTURES / "logs" / "samples" / "era-2024-11-typo-oom.log",
    FIXTURES / "logs" / "samples" / "era-2025-06-pd.log",
    FIXTURES / "logs" / "clean" / "pp0.log",
    FIXTURES / "logs" / "incident" / "pp1.log.gz",
]
CATALOGUES = sorted((Path(__file__).parents[2] / "kvforensics" / "logs" / "formats").glob("*.toml"))
MOONCAKE = FIXTURES / "scenarios" / "mooncake-conversation.toml"
TRACE = FIXTURES / "traces" / "conversation_trace.jsonl"

SMALL = ["-1", "0", "1", "2", "64"]
BIG = ["-1", "0", "1", "3", "7747", str(2**31), str(2**63), str(2**70)]
WHEN = [
    "0",
    "-1",
    "3",
    str(2**70),
    "2026-11-02 15:16:27",
    "2026-11-02T15:16:27.5",
    "2026-13-45 99:99:99",
    "9999-12-31 23:59:59",
    "abc",
    "",
]
TEXT = ["", " ", "x" * 5000, "a\nb", "# h\n| a | b |\n```", "é☃\u202e", "%s{0}$(x)"]
POLICIES = ["prefix", "fixed", "park", "drain", "upstream", "bogus", "", ",", "prefix,park"]
FLOATS = ["nan", "inf", "-inf", "-1", "0", "1e-300", "1e308", "0.5"]
#: each command's flags the first draw does not give, with the values to try
FLAGS: dict[str, list[tuple[str, list[str] | None]]] = {
    "rounds": [("--since", WHEN), ("--until", WHEN), ("--last", BIG)],
    "parse": [("--since", WHEN), ("--until", WHEN)],
    "replay": [
        ("--policy", POLICIES),
        ("--transfer-seconds", FLOATS),
        ("--jobs", ["0", "-1", "1", "2", "3"]),
    ],
    "diff": [("--transfer-seconds", FLOATS)],
    "simulate": [("--show", BIG), ("--rounds", BIG)],
    "explain": [("--policy", POLICIES), ("--rid", ["", "x" * 5000, "as-1keim4u1e8"])],
    "report": [("--round", BIG), ("--title", TEXT), ("--force", None)],
    "scan": [
        ("--group-by", ["dir", "file", "bogus", ""]),
        ("--policy", POLICIES),
        ("--jobs", ["0", "-1", "1", "2"]),
        ("--engine", ["local", "bogus", ""]),
        ("--transfer-seconds", FLOATS),
    ],
    # sizes that keep the KV tensors small: a huge pool of tensors is another matter
    "exec": [
        ("--dtype", ["bf16", "fp16", "fp32", "fp8", ""]),
        ("--backend", ["auto", "torch", "interpret", "bogus"]),
        ("--round-checks", None),
        ("--no-round-checks", None),
        ("--layers", SMALL),
        ("--kv-dim", SMALL),
        ("--rope-dim", SMALL),
    ],
}
LOG_COMMANDS = {"rounds", "replay", "diff", "explain", "report", "scan", "exec", "parse"}


def harden(case, rng: random.Random, tmp: Path) -> None:
    """Make ``case`` (written into ``tmp``) more hostile, in place."""
    kinds = {p.suffix for p in case.inputs}
    if kinds & {".log", ".gz"}:
        for p in case.inputs:
            if rng.random() < 0.5:
                _damage_log(rng, p)
        if case.argv[0] in LOG_COMMANDS and rng.random() < 0.1:
            case.argv += ["--formats", str(_catalogue(rng, tmp))]
    if ".toml" in kinds and rng.random() < 0.4:
        case.inputs += _damage_scenario(rng, case.inputs[0], tmp)
    for p in case.inputs:
        if p.suffix in (".parquet", ".json", ".ndjson") and rng.random() < 0.3:
            _flip_bytes(rng, p)
    if rng.random() < 0.06:
        _odd_input(rng, case, tmp)
    for flag, values in FLAGS.get(case.argv[0], []):
        if rng.random() < 0.15:
            case.argv += [flag] if values is None else [flag, rng.choice(values)]
    _outputs(rng, case, tmp)


# -- logs ------------------------------------------------------------------------------

_TIME = re.compile(rb"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)?")
_RANK = re.compile(rb" PP\d+\]")


def _damage_log(rng: random.Random, path: Path) -> None:
    data = path.read_bytes()
    gz = path.suffix == ".gz"
    if gz:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError):
            return  # a cut stream stays as the first draw made it
    how = rng.choice(["other", "other", "huge", "repeat", "endings", "time", "rank"])
    if how == "other":
        src = rng.choice(OTHER_LOGS)
        data = src.read_bytes()
        data = gzip.decompress(data) if src.suffix == ".gz" else data
    elif how == "huge":
        lines = data.split(b"\n")
        at = rng.randrange(len(lines) + 1)
        head = lines[min(at, len(lines) - 1)][:60]
        unit = rng.choice([b"x", b"9", b"rid=a, ", b"\xff"])
        body = unit * (rng.choice([1 << 16, 1 << 20, 1 << 22]) // len(unit))
        lines.insert(at, head + body)
        data = b"\n".join(lines)
    elif how == "repeat":
        lines = data.split(b"\n")
        a = rng.randrange(len(lines))
        b = rng.randint(a, min(len(lines), a + 30))
        lines[a:b] = lines[a:b] * rng.choice([2, 20, 300])
        data = b"\n".join(lines)
    elif how == "endings":
        data = rng.choice(
            [
                data.replace(b"\n", b"\r\n"),
                data.replace(b"\n", b"\r"),
                b"\xef\xbb\xbf" + data,
                data.decode("utf-8", "replace").encode("utf-16"),
            ]
        )
    elif how == "time":
        new = rng.choice(
            [
                b"9999-12-31 23:59:59",
                b"2026-13-45 25:61:61",
                b"0000-00-00 00:00:00",
                b"2020-01-01 00:00:00",
                b"1970-01-01 00:00:00.000",
            ]
        )
        spans = [m.span() for m in _TIME.finditer(data)]
        for a, b in sorted(rng.sample(spans, min(len(spans), rng.randint(1, 3))), reverse=True):
            data = data[:a] + new + data[b:]
    else:
        tag = rng.choice(
            [b" PP3]", b" TP0]", b" PP0 TP1]", b"]", b" DP0 PP0]", b" PP-1]", b" PP0 PP0]"]
        )
        spans = [m.span() for m in _RANK.finditer(data)]
        for a, b in sorted(rng.sample(spans, min(len(spans), rng.randint(1, 5))), reverse=True):
            data = data[:a] + tag + data[b:]
    path.write_bytes(gzip.compress(data) if gz else data)


_ASSIGN = re.compile(r"(?m)^(\s*)([A-Za-z_]+)(\s*=\s*)(.+)$")


def _catalogue(rng: random.Random, tmp: Path) -> Path:
    """A built-in format catalogue with a setting changed, dropped or garbled."""
    text = rng.choice(CATALOGUES).read_text()
    spans = list(_ASSIGN.finditer(text))
    for _ in range(rng.randint(1, 3)):
        m = rng.choice(spans)
        new = rng.choice(
            [
                f"{m[1]}{m[2]}{m[3]}'(?P<rid>'",
                f"{m[1]}{m[2]}{m[3]}'.*'",
                f"{m[1]}{m[2]}{m[3]}'^(?P<seq_len>\\d+)'",
                f'{m[1]}{m[2]}{m[3]}{{ rid = "float" }}',
                f"{m[1]}{m[2]}{m[3]}1",
                "",
                m[0][: len(m[0]) // 2],
            ]
        )
        text = text.replace(m[0], new, 1)
    path = tmp / "formats.toml"
    path.write_text(text)
    return path


# -- scenarios, traces, ledgers ----------------------------------------------------------


def _damage_scenario(rng: random.Random, path: Path, tmp: Path) -> list[Path]:
    """The trace-driven scenario with a cut or damaged copy of its trace, or damage
    to the scenario file's bytes; the trace when one is written."""
    how = rng.choice(["trace", "trace", "table", "bytes", "empty"])
    if how == "trace":
        text = MOONCAKE.read_text().replace("../traces/conversation_trace.jsonl", "trace.jsonl")
        path.write_text(text)
        lines = TRACE.read_text().splitlines()[: rng.choice([0, 1, 50, 400])]
        if lines and rng.random() < 0.6:
            i = rng.randrange(len(lines))
            lines[i] = rng.choice(
                [
                    lines[i][: len(lines[i]) // 2],
                    lines[i].replace('"input_length": ', '"input_length": -'),
                    lines[i].replace('"hash_ids": [', '"hash_ids": [1e999, '),
                    lines[i].replace('"timestamp": ', '"timestamp": 1' + "0" * 30),
                    '{"timestamp": "nan"}',
                    "[]",
                ]
            )
        trace = tmp / "trace.jsonl"
        trace.write_bytes(
            ("\n".join(lines) + "\n").encode() + (b"\xff\n" if rng.random() < 0.1 else b"")
        )
        return [trace]
    if how == "table":
        path.write_text(
            path.read_text()
            + rng.choice(["\n[config]\npage_size = 64\n", "\n[[waiting]]\n", "\n[pool]\n"])
        )
    elif how == "bytes":
        data = bytearray(path.read_bytes())
        data[rng.randrange(len(data))] = rng.choice([0, 0xFF, 0x80, ord('"'), ord("[")])
        path.write_bytes(bytes(data))
    else:
        path.write_bytes(b"")
    return []


def _flip_bytes(rng: random.Random, path: Path) -> None:
    data = bytearray(path.read_bytes())
    for _ in range(rng.randint(1, 6)):
        if data:
            data[rng.randrange(len(data))] = rng.randrange(256)
    path.write_bytes(bytes(data))


# -- paths -----------------------------------------------------------------------------


def _odd_input(rng: random.Random, case, tmp: Path) -> None:
    """A path that is not a readable file of the kind the command takes, or the same
    input twice."""
    (tmp / "adir").mkdir(exist_ok=True)
    (tmp / "empty.log").write_bytes(b"")
    link = tmp / "link.log"
    if not link.exists():
        link.symlink_to(case.inputs[0])
    odd = rng.choice(
        [
            tmp / "missing.log",
            tmp / "adir",
            Path("/dev/null"),
            tmp / "empty.log",
            link,
            case.inputs[0],
        ]
    )
    i = case.argv.index(str(case.inputs[0]))
    case.argv.insert(i + 1 if rng.random() < 0.5 else i, str(odd))


def _outputs(rng: random.Random, case, tmp: Path) -> None:
    """Output flags for rounds and scan, and odd spellings of any output path: relative
    (the run's directory is ``tmp``), with a trailing slash, a newline in its name, a
    symlink to an input, a directory holding someone else's file."""
    cmd = case.argv[0]
    if cmd == "rounds" and rng.random() < 0.3:
        out = tmp / rng.choice(["r.ndjson", "r.parquet", "r.csv", "new/r.parquet"])
        case.argv += ["-o", str(out)]
        case.outputs.append(out)
    if cmd == "scan" and rng.random() < 0.3:
        out = tmp / rng.choice(["nodes.parquet", "nodes.csv", "new/nodes.parquet"])
        case.argv += ["-o", str(out)]
        case.outputs.append(out)
    if cmd == "scan" and rng.random() < 0.2:
        out = tmp / rng.choice(["rep", "afile", "new/rep"])
        case.argv += ["--report", str(out)]
        case.outputs.append(out)
    if not case.outputs or rng.random() > 0.25:
        _beside(case)
        return
    old = case.outputs[-1]
    full = tmp / "full"
    full.mkdir(exist_ok=True)
    (full / "theirs.txt").write_text("not ours")
    link = tmp / f"to-input{old.suffix}"
    if not link.exists() and case.inputs:
        link.symlink_to(case.inputs[0])
    name = rng.choice([old.name or "out", f"o\nx{old.suffix}", "-", f" {old.name}"])
    new, shown = rng.choice(
        [
            (tmp / name, name),  # relative to the run's directory
            (old, f"{old}/"),
            (tmp / name, str(tmp / name)),
            (full, str(full)),
            (link, str(link)),
        ]
    )
    i = len(case.argv) - 1 - case.argv[::-1].index(str(old))
    case.argv[i] = shown
    case.outputs[-1] = new
    _beside(case)


def _beside(case) -> None:
    """scan -o writes its gap admissions table beside the nodes table."""
    if case.argv[0] != "scan" or "-o" not in case.argv:
        return
    out = Path(case.argv[case.argv.index("-o") + 1])
    out = out if out.is_absolute() else case.outputs[0].parent / out
    case.outputs.append(out.with_name(f"{out.stem}.gap_admissions{out.suffix or '.parquet'}"))
