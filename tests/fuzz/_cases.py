"""Hostile inputs for every command, and what a run must never do with them.

A case is a command line over damaged copies of the shipped logs, scenarios and ledgers,
with flags and output paths drawn from values users get wrong. It is built from a
``random.Random``, so the CI suite (hypothesis) and ``scripts/fuzz.py`` share it.

A run fails when it exits 70 (a bug of ours), prints a traceback, changes an input,
leaves a temporary or half-written file, or creates anything when it fails."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import FIXTURES

SAMPLES = FIXTURES / "logs" / "samples"
LOGS = [
    SAMPLES / "incident-pp0.log",
    SAMPLES / "incident-pp3.log",
    SAMPLES / "incident-pp1.log",
    SAMPLES / "era-2025-03-tp.log",
    SAMPLES / "era-2026-07-hybrid.log",
    SAMPLES / "decode-node.log",
    FIXTURES / "logs" / "contradiction" / "pp0.log",
]
SCENARIOS = [
    FIXTURES / "scenarios" / "incident-2026-11-02.toml",
    FIXTURES / "scenarios" / "postmortem-abc.toml",
    FIXTURES / "scenarios" / "prefix-counterexample.toml",
]
#: numbers users and damaged logs produce
NUMBERS = [
    "-1",
    "0",
    "1",
    "63",
    "64",
    "100",
    "256",
    "16384",
    "2147483648",
    str(2**40),
    str(2**62),
    str(2**63),
    str(2**64),
    str(2**70),
    "10" * 20,
]
VALUES = [*NUMBERS, "nan", "inf", "-inf", "1e999", "1.5", "", "abc", "-", "None"]
TOML_VALUES = [
    *NUMBERS,
    "nan",
    "inf",
    "-inf",
    "1.5",
    '"abc"',
    '""',
    "[1, 2]",
    "[]",
    "true",
    "{ a = 1 }",
    "1979-05-27",
    '"' + "r" * 5000 + '"',
]
POLICIES = [
    "prefix",
    "fixed",
    "upstream",
    "drain",
    "park",
    "prefix,fixed",
    "bogus",
    "",
    ",",
    "fixed,fixed",
]
FORMATS = ["table", "json", "markdown", "xml", ""]
_NUM = re.compile(rb"-?\d+")
#: Python's own traceback (a log's copy of one starts with its prefix, not at a line start)
TRACEBACK = re.compile(r'(?m)^Traceback \(most recent call last\):\n  File "')


@dataclass
class Case:
    argv: list[str]
    inputs: list[Path]
    #: paths the command may create when it succeeds (a file or a directory)
    outputs: list[Path] = field(default_factory=list)

    def describe(self) -> str:
        return " ".join(a if len(a) < 80 else a[:60] + "..." for a in self.argv)


# -- damaged logs -------------------------------------------------------------------


def _mutate_log(rng: random.Random, data: bytes) -> bytes:
    how = rng.choice(["number", "number", "cut", "nul", "lines", "bytes", "long", "none"])
    if how == "number":
        for _ in range(rng.randint(1, 4)):
            spans = [m.span() for m in _NUM.finditer(data)]
            if not spans:
                break
            a, b = rng.choice(spans)
            data = data[:a] + rng.choice(VALUES).encode() + data[b:]
    elif how == "cut":
        data = data[: rng.randint(0, len(data))]
    elif how == "nul":
        at = rng.randint(0, len(data))
        data = data[:at] + b"\x00" * rng.randint(1, 200) + data[at:]
    elif how == "lines":
        lines = data.split(b"\n")
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(lines))
            op = rng.choice(["drop", "dup", "swap"])
            if op == "drop":
                lines.pop(i)
            elif op == "dup":
                lines.insert(i, lines[i])
            else:
                j = rng.randrange(len(lines))
                lines[i], lines[j] = lines[j], lines[i]
            if not lines:
                break
        data = b"\n".join(lines)
    elif how == "bytes":
        buf = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            if buf:
                buf[rng.randrange(len(buf))] = rng.randrange(256)
        data = bytes(buf)
    elif how == "long":
        data = data.replace(b"as-xpkq7d03n5", b"x" * rng.choice([300, 100_000]))
    return data


def write_logs(rng: random.Random, tmp: Path) -> list[Path]:
    picks = [LOGS[0]] if rng.random() < 0.6 else []
    picks += rng.sample(LOGS, rng.randint(0 if picks else 1, 2))
    out = []
    for i, src in enumerate(dict.fromkeys(picks)):
        data = src.read_bytes()
        if rng.random() < 0.8:
            data = _mutate_log(rng, data)
        name = f"log{i}.log"
        if rng.random() < 0.2:
            data = gzip.compress(data)
            if rng.random() < 0.5:
                data = data[: rng.randint(10, len(data))]
            name += ".gz"
        path = tmp / name
        path.write_bytes(data)
        out.append(path)
    return out


# -- damaged scenarios and ledgers ----------------------------------------------------

_ASSIGN = re.compile(r"(?m)^(\s*)([A-Za-z_]+)(\s*=\s*)(.+)$")


def write_scenario(rng: random.Random, tmp: Path) -> Path:
    text = rng.choice(SCENARIOS).read_text()
    for _ in range(rng.choice([0, 0, 1, 1, 2, 3])):
        spans = list(_ASSIGN.finditer(text))
        m = rng.choice(spans)
        op = rng.choice(["value", "value", "value", "drop", "rename", "garble"])
        if op == "value":
            new = f"{m[1]}{m[2]}{m[3]}{rng.choice(TOML_VALUES)}"
        elif op == "drop":
            new = ""
        elif op == "rename":
            new = f"{m[1]}{m[2]}x{m[3]}{m[4]}"
        else:
            new = m[0][: rng.randint(0, len(m[0]))]
        text = text[: m.start()] + new + text[m.end() :]
    path = tmp / "scenario.toml"
    path.write_text(text)
    return path


def write_ledger(rng: random.Random, tmp: Path, ledgers: dict[str, Path]) -> Path:
    kind = rng.choice(sorted(ledgers))
    data = ledgers[kind].read_bytes()
    path = tmp / f"ledger{kind}"
    if kind == ".csv" and rng.random() < 0.8:
        lines = data.decode().splitlines()
        op = rng.choice(["cell", "cell", "header", "drop_column", "cut"])
        if op == "cell" and len(lines) > 1:
            i = rng.randrange(1, len(lines))
            cells = lines[i].split(",")
            cells[rng.randrange(len(cells))] = rng.choice(VALUES)
            lines[i] = ",".join(cells)
        elif op == "header":
            lines.insert(rng.randrange(len(lines)), lines[0])
        elif op == "drop_column":
            j = rng.randrange(len(lines[0].split(",")))
            lines = [",".join(c for k, c in enumerate(ln.split(",")) if k != j) for ln in lines]
        else:
            lines = lines[: rng.randrange(len(lines))]
        data = ("\n".join(lines) + "\n").encode()
    elif rng.random() < 0.3:
        data = data[: rng.randint(0, len(data))]
    path.write_bytes(data)
    return path


# -- flags and outputs ----------------------------------------------------------------


def _size_flags(rng: random.Random) -> list[str]:
    out: list[str] = []
    for flag in ("--page-size", "--align", "--chunk-size", "--pool-size"):
        if rng.random() < 0.15:
            out += [flag, rng.choice(NUMBERS)]
    if rng.random() < 0.1:
        out += ["--transfer-seconds", rng.choice(["nan", "inf", "-1", "0", "1e308", "4"])]
    if rng.random() < 0.05:
        out += ["--rank", rng.choice(["PP0", "PP9", "", "x" * 300])]
    return out


def output_path(rng: random.Random, tmp: Path, suffix: str, inputs: list[Path]) -> Path:
    (tmp / "adir").mkdir(exist_ok=True)
    (tmp / "afile").write_text("keep")
    choices = [
        tmp / f"out{suffix}",
        tmp / f"out{suffix}",
        tmp / "new" / "sub" / f"out{suffix}",
        tmp / "adir",
        tmp / "afile" / f"x{suffix}",
        Path("/proc") / f"x{suffix}",
        tmp / ("o" * 300 + suffix),
        tmp / "out.xlsx",
        *inputs,
    ]
    return rng.choice(choices)


COMMANDS = ("parse", "rounds", "replay", "simulate", "diff", "explain", "report", "scan", "exec")


def make_ledgers(root: Path) -> dict[str, Path]:
    """The incident scenario's ledgers in every format ``simulate --ledger`` writes."""
    import polars as pl

    from kvforensics.ledger_io import write_frame
    from kvforensics.scenario import load_scenario

    sc = load_scenario(SCENARIOS[0])
    frame = pl.concat([sc.build_node(p).run().ledger_frame() for p in ("prefix", "fixed")])
    out = {}
    for ext in (".csv", ".parquet", ".json", ".ndjson"):
        out[ext] = root / f"seed-ledger{ext}"
        write_frame(frame, out[ext])
    return out


def make_case(
    rng: random.Random,
    tmp: Path,
    ledgers: dict[str, Path],
    cmd: str | None = None,
    hostile: bool = True,
    wide: bool = True,
) -> Case:
    """One command line over fresh damaged inputs written into ``tmp``; ``hostile``:
    made worse still by tests/fuzz/_hostile.py (off: the case earlier campaigns ran), and
    ``wide`` (with it) by tests/fuzz/_wider.py."""
    # exec (torch) and scan (a process per node) cost ten times the others: drawn less
    cmd = cmd or rng.choices(COMMANDS, weights=[3, 3, 3, 3, 3, 3, 2, 1, 1])[0]
    if cmd in ("simulate", "exec") or (cmd in ("diff", "explain", "report") and rng.random() < 0.4):
        inputs = [write_scenario(rng, tmp)]
    elif cmd in ("diff", "explain") and rng.random() < 0.5:
        inputs = [write_ledger(rng, tmp, ledgers) for _ in range(rng.choice([1, 1, 2]))]
    else:
        inputs = write_logs(rng, tmp)
    argv = [cmd, *map(str, inputs)]
    outputs: list[Path] = []
    logs = inputs[0].suffix not in (".toml", ".csv", ".parquet", ".json", ".ndjson")
    if logs and cmd != "parse":
        argv += _size_flags(rng)
    if cmd == "parse":
        out = output_path(rng, tmp, rng.choice([".parquet", ".csv", ".ndjson"]), inputs)
        argv += ["-o", str(out)]
        outputs.append(out)
    elif cmd == "simulate":
        argv += [
            "--policy",
            rng.choice(POLICIES),
            "--format",
            rng.choice(FORMATS[:2] * 3 + FORMATS),
        ]
        if rng.random() < 0.3:
            out = output_path(
                rng, tmp, rng.choice([".csv", ".parquet", ".json", ".ndjson"]), inputs
            )
            argv += ["--ledger", str(out)]
            outputs.append(out)
        if rng.random() < 0.2:
            argv += ["--rounds", rng.choice(NUMBERS)]
    elif cmd == "explain":
        if rng.random() < 0.8:
            argv += ["--round", rng.choice(["0", "1", "3", "7747", *NUMBERS])]
        else:
            argv += ["--rid", rng.choice(["as-1keim4u1e8", "nope", "x" * 1000])]
        argv += ["--format", rng.choice(FORMATS)]
    elif cmd == "diff":
        if rng.random() < 0.7:
            argv += ["--policy", rng.choice(POLICIES)]
        argv += ["--format", rng.choice(FORMATS)]
    elif cmd == "report":
        out = output_path(rng, tmp, "", inputs)
        argv += ["-o", str(out), "--policy", rng.choice(POLICIES[:5] * 2 + POLICIES)]
        outputs.append(out)
    elif cmd in ("rounds", "replay"):
        argv += ["--format", rng.choice(["table", "json", "table", "x"])]
        if cmd == "rounds" and rng.random() < 0.2:
            argv += ["--last", rng.choice(NUMBERS)]
    elif cmd == "scan":
        argv += ["--jobs", "1", "--format", rng.choice(["table", "json"])]
    elif cmd == "exec":
        argv += ["--policy", rng.choice(["prefix", "fixed", "bogus"]), "--device", "cpu"]
        argv += ["--format", rng.choice(["table", "json"])]
    case = Case(argv, inputs, outputs)
    if hostile:
        from tests.fuzz._hostile import harden

        harden(case, rng, tmp)
        if wide:
            from tests.fuzz._wider import widen

            widen(case, rng, tmp)
    return case


# -- what a run must not do ------------------------------------------------------------


def snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root`` with a digest of its bytes (directories as "dir", links
    by their target, fifos and other kinds by their kind: reading them could block)."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_symlink():
            out[str(p.relative_to(root))] = f"link:{os.readlink(p)}"
        elif p.is_dir():
            out[str(p.relative_to(root))] = "dir"
        elif not stat.S_ISREG(p.lstat().st_mode):
            out[str(p.relative_to(root))] = f"kind:{stat.S_IFMT(p.lstat().st_mode)}"
        else:
            out[str(p.relative_to(root))] = hashlib.blake2b(
                p.read_bytes(), digest_size=16
            ).hexdigest()
    return out


#: exit codes a run may end with: 0, 1 (exec: the tensors disagree with the model),
#: 2 (an error the user can fix), 3 and 4 (replay and rounds: a mismatch, not reproduced)
EXIT_CODES = {0, 1, 2, 3, 4}
#: codes that are an answer (outputs may be written); any other is a failed run
ANSWERS = {0, 1, 3, 4}
#: a Rust library's panic, printed straight to file descriptor 2
PANIC = re.compile(r"(?m)^thread '[^']*' panicked at ")


def problems(
    case: Case, code: int, text: str, raw: str, tmp: Path, before: dict[str, str]
) -> list[str]:
    """What this run did wrong (empty when nothing); ``text`` is what it printed on
    Python's streams, ``raw`` what reached file descriptors 1 and 2 past them."""
    out = []
    if code == 70:
        out.append(f"exit 70: {text.strip().splitlines()[-1] if text.strip() else ''}")
    elif code not in EXIT_CODES and code >= 0:
        out.append(f"exit {code}, not one of the documented codes")
    if TRACEBACK.search(text) or TRACEBACK.search(raw):
        out.append("traceback")
    if PANIC.search(raw) or "Fatal Python error" in raw:
        out.append(f"raw output: {raw.strip()[:200]}")
    after = snapshot(tmp)
    changed = [p for p, h in before.items() if after.get(p) != h]
    if changed:
        out.append(f"inputs changed or removed: {changed[:3]}")
    new = [p for p in after if p not in before]
    stray = [p for p in new if p.endswith(".tmp") or ".kvforensics-probe." in p]
    if stray:
        out.append(f"temporary files left: {stray[:3]}")
    allowed = {str(o.relative_to(tmp)) for o in case.outputs if o.is_relative_to(tmp)}
    if code not in ANSWERS and new:
        out.append(f"a failed run (exit {code}) created {new[:3]}")
    elif new:
        extra = [
            p
            for p in new
            if not any(p == a or p.startswith(a + "/") or a.startswith(p + "/") for a in allowed)
        ]
        if extra:
            out.append(f"files outside the outputs: {extra[:3]}")
    out += _half_written(case, code)
    return out


def _written_files(case: Case) -> list[Path]:
    """The files a run wrote: each output file, and every file in an output directory
    (``report``'s attachment) that is not one of the inputs."""
    out: list[Path] = []
    for o in case.outputs:
        files = sorted(p for p in o.rglob("*") if p.is_file()) if o.is_dir() else [o]
        out += [f for f in files if f.is_file() and f not in case.inputs]
    return out


def _half_written(case: Case, code: int) -> list[str]:
    """A successful run's event, ledger, figure and report files read back whole."""
    import polars as pl

    readers = {
        ".parquet": pl.read_parquet,
        ".csv": pl.read_csv,
        # line by line: polars infers the columns from the first rows only, and a
        # column null there but not later would read as damage
        ".ndjson": lambda p: [json.loads(ln) for ln in p.read_text().splitlines()],
        ".json": lambda p: json.loads(p.read_text()),
        ".png": _read_png,
        ".md": lambda p: p.read_text(encoding="utf-8"),
    }
    out = []
    if code not in ANSWERS:
        return out
    for o in _written_files(case):
        if o.suffix not in readers or (o.suffix == ".ndjson" and o.stat().st_size == 0):
            continue  # no events: an empty NDJSON file is the whole answer
        try:
            if o.stat().st_size == 0 and o.suffix in (".png", ".md", ".parquet"):
                raise ValueError("empty")
            readers[o.suffix](o)
        except Exception as exc:  # any failure to read back is the finding
            out.append(f"{o.name} does not read back: {type(exc).__name__}")
    return out


def _read_png(path: Path) -> None:
    """A whole PNG: its signature first and its IEND chunk last."""
    data = path.read_bytes()
    if not (data.startswith(b"\x89PNG\r\n\x1a\n") and data.endswith(b"IEND\xaeB`\x82")):
        raise ValueError("not a whole PNG")
