"""Lines -> typed events, vectorised: one polars pass per catalogue entry, no per-line Python.

A chunk always starts at a prefixed line and holds whole multi-line messages (the
reader guarantees it), so this stage needs no state from earlier chunks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import polars as pl

from kvforensics.logs.catalogue import Catalogue, FieldSpec, Format

# An OOM tree dump can run to megabytes; the event keeps its head, the rest is counted.
MAX_ATTACHED_CHARS = 1 << 20
UNMATCHED_SAMPLES = 5
_NUMBER = r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
_JSON_NUMBER = r"^-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?$"


@dataclass
class ChunkStats:
    lines: int = 0
    blank: int = 0
    matched: dict[str, int] = field(default_factory=dict)
    unmatched: int = 0
    unmatched_samples: list[tuple[int, str]] = field(default_factory=list)
    attached: int = 0


def _convert(expr: pl.Expr, fs: FieldSpec, lenient: bool) -> pl.Expr:
    """Text -> the field's type. `lenient` values come from free text (`12.31 GB`,
    `'prefill'`, `None`), so numbers are read from the leading digits and quotes dropped."""
    if fs.type == "str":
        out = expr.str.strip_chars().str.strip_chars("'\"") if lenient else expr
        return pl.when(out != "None").then(out)
    if fs.type in ("int", "float"):
        if lenient:
            expr = expr.str.extract(_NUMBER, 1)
        if fs.type == "int":
            # "16384.0" is an int written by a float formatter; never silently truncate
            return expr.cast(pl.Int64, strict=False)
        return expr.cast(pl.Float64, strict=False)
    if fs.type == "bool":
        v = expr.str.strip_chars().str.to_lowercase()
        return (
            pl.when(v.is_in(["true", "1", "yes"]))
            .then(True)
            .when(v.is_in(["false", "0", "no"]))
            .then(False)
        )
    # list: `[a, 'b', c]` -> ["a", "b", "c"]
    items = expr.str.strip_chars("[]() ").str.split(",")
    items = items.list.eval(pl.element().str.strip_chars(" '\""))
    return items.list.eval(pl.element().filter(pl.element() != ""))


def _key_regex(pairs_sep: str, assign: str, key: str, numeric: bool) -> str:
    # a number is captured without its unit ("12.31 GB"): one regex pass, no second parse
    stop = re.escape(pairs_sep[:1] or ",")
    value = (
        r"[-+]?[0-9.]+(?:[eE][-+]?[0-9]+)?"
        if numeric
        else rf"'[^']*'|\"[^\"]*\"|\[[^\]]*\]|[^{stop}]*"
    )
    return rf"(?:^|{re.escape(pairs_sep)}){re.escape(key)}{re.escape(assign)}\s*({value})"


def _json_text(expr: pl.Expr) -> pl.Expr:
    esc = (
        expr.str.replace_all("\\", "\\\\", literal=True)
        .str.replace_all('"', '\\"', literal=True)
        .str.replace_all(r"[\x00-\x1f]", " ")
    )
    return pl.concat_str([pl.lit('"'), esc, pl.lit('"')])


def _extra(ok: pl.DataFrame, fmt: Format, src: pl.Expr) -> pl.Series:
    """Unknown `key: value` pairs of each row as a JSON object (numbers stay numbers).
    Known pairs are cut out first, so only the rare rows with leftovers are split."""
    p = fmt.pairs
    known = sorted({k for fs in fmt.fields for k in fs.keys}, key=len, reverse=True)
    stop = re.escape(p.sep[:1] or ",")
    cut = (
        rf"(?:^|{re.escape(p.sep)})(?:{'|'.join(re.escape(k) for k in known)})"
        rf"{re.escape(p.assign)}[^{stop}]*"
    )
    rest = ok.select("idx", src.str.replace_all(cut, "").str.strip_chars(p.sep + " ").alias("p"))
    rest = rest.filter(pl.col("p") != "")
    empty = pl.Series("extra", [None] * ok.height, dtype=pl.String)
    if rest.height == 0:
        return empty
    ex = (
        rest.with_columns(pl.col("p").str.split(p.sep))
        .explode("p")
        .with_columns(pl.col("p").str.splitn(p.assign, 2).alias("kv"))
        .select(
            "idx",
            pl.col("kv").struct.field("field_0").str.strip_chars().alias("k"),
            pl.col("kv").struct.field("field_1").str.strip_chars().alias("v"),
        )
        .filter(pl.col("k").is_not_null() & (pl.col("k") != ""))
    )
    value = (
        pl.when(pl.col("v").is_null())
        .then(pl.lit("null"))
        .when(pl.col("v").str.contains(_JSON_NUMBER))
        .then(pl.col("v"))
        .otherwise(_json_text(pl.col("v")))
    )
    frag = pl.concat_str([_json_text(pl.col("k")), pl.lit(": "), value])
    obj = pl.concat_str([pl.lit("{"), frag.str.join(", "), pl.lit("}")])
    objs = ex.group_by("idx").agg(obj.alias("extra"))
    return ok.select("idx").join(objs, on="idx", how="left")["extra"]


def _fields(ok: pl.DataFrame, fmt: Format) -> pl.DataFrame:
    """Typed field columns for rows that matched `fmt` (`_g` = the line regex's groups)."""
    groups = pl.col("_g")
    body = pl.col("body") if "body" in ok.columns else pl.col("text")
    exprs: list[pl.Expr] = []
    for fs in fmt.fields:
        if fs.group:
            raw, lenient = groups.struct.field(fs.group), False
        elif fs.keys:
            src = groups.struct.field(fmt.pairs.group)
            numeric = fs.type in ("int", "float")
            raw = pl.coalesce(
                [
                    src.str.extract(_key_regex(fmt.pairs.sep, fmt.pairs.assign, k, numeric), 1)
                    for k in fs.keys
                ]
            )
            lenient = not numeric
        else:
            raw, lenient = pl.coalesce([body.str.extract(rx, 1) for rx in fs.regexes]), True
        exprs.append(_convert(raw, fs, lenient).alias(fs.name))
    keep = [c for c in ("attached",) if c in ok.columns]
    out = ok.select("idx", "text", *keep, *exprs, pl.lit(fmt.name).alias("kind"))
    if fmt.pairs is not None and fmt.pairs.extra:
        out = out.with_columns(_extra(ok, fmt, groups.struct.field(fmt.pairs.group)))
    return out


def _multiline(
    df: pl.DataFrame,
    heads: pl.DataFrame,
    taken: pl.Series,
    cat: Catalogue,
    fmt: Format,
    stats: ChunkStats,
) -> tuple[pl.DataFrame, list[int]]:
    """Attach to each head line the unprefixed, unmatched lines after it (and an `absorb`
    line right after those). Returns heads with `body` (whole message) and `attached`."""
    prefixed = df["text"].str.contains(cat.prefix.regex).fill_null(False)
    boundary = prefixed | taken
    group = boundary.cast(pl.Int64).cum_sum()
    g = pl.DataFrame(
        {
            "idx": df["idx"],
            "text": df["text"],
            "group": group,
            "boundary": boundary,
            "prefixed": prefixed,
        }
    )
    head_groups = g["group"].gather(heads["idx"])
    rows = g.filter(pl.col("group").is_in(pl.concat([head_groups, head_groups + 1]).to_list()))
    by_group = {k[0]: v for k, v in rows.partition_by("group", as_dict=True).items()}
    prefix_re = re.compile(cat.prefix.regex)
    bodies, attached, used = [], [], []
    for gid in head_groups.to_list():
        own = by_group[gid]
        lines = own["text"].fill_null("").to_list()
        used += own["idx"].to_list()[1:]
        nxt = by_group.get(gid + 1)
        if nxt is not None and fmt.absorb:
            head = nxt.row(0, named=True)
            m = prefix_re.match(head["text"] or "")
            if (
                head["prefixed"]
                and not taken[head["idx"]]
                and m
                and any(head["text"][m.end() :].startswith(a) for a in fmt.absorb)
            ):
                lines += nxt["text"].fill_null("").to_list()
                used += nxt["idx"].to_list()
        rest = "\n".join(lines[1:])
        if len(rest) > MAX_ATTACHED_CHARS:
            kept = rest[:MAX_ATTACHED_CHARS].rsplit("\n", 1)[0]
            dropped = rest.count("\n") - kept.count("\n")
            rest = f"{kept}\n[kvforensics: {dropped} more lines not kept]"
        bodies.append("\n".join(lines[:1] + ([rest] if rest else [])))
        attached.append(rest or None)
    stats.attached += len(used)
    out = heads.with_columns(
        pl.Series("body", bodies, dtype=pl.String), pl.Series("attached", attached, dtype=pl.String)
    )
    return out, used


def _prefix_columns(events: pl.DataFrame, cat: Catalogue) -> pl.DataFrame:
    pre = events.select(pl.col("text").str.extract_groups(cat.prefix.regex)).to_series().struct
    date, ms, tags = pre.field("date"), pre.field("ms"), pre.field("tags").str.strip_chars()
    time = date.str.to_datetime("%Y-%m-%d %H:%M:%S", time_unit="ms", strict=False)
    ms_int = ms.cast(pl.Int64, strict=False).fill_null(0)
    cols = [
        (time + pl.duration(milliseconds=ms_int)).alias("time"),
        ms.is_not_null().alias("time_has_ms"),
        tags.fill_null("").alias("rank"),
    ]
    # a chunk holds a handful of distinct tag strings: decode those, then map
    tag_re = {
        col: re.compile(rf"(?:^| ){re.escape(tag)}([0-9]+)") for tag, col in cat.prefix.tags.items()
    }
    uniq = [u for u in tags.unique().to_list() if u]
    for col, rx in tag_re.items():
        table = {u: int(m.group(1)) for u in uniq if (m := rx.search(u))}
        cols.append(tags.replace_strict(table, default=None, return_dtype=pl.Int64).alias(col))
    return events.with_columns(cols)


def _match(cand: pl.DataFrame, fmt: Format) -> pl.DataFrame:
    """Rows of `cand` that match `fmt`, with `_g` = struct of the regex's groups."""
    g = cand.with_columns(pl.col("text").str.extract_groups(fmt.line_regex).alias("_g"))
    return g.filter(pl.col("_g").struct.field("__m").is_not_null())


def extract_chunk(
    lines: pl.Series, first_line: int, file: str, cat: Catalogue, last_line_cut: bool = False
) -> tuple[pl.DataFrame, ChunkStats]:
    """Events of one chunk of lines (`first_line` = 1-based number of its first line)."""
    stats = ChunkStats(lines=len(lines))
    df = pl.DataFrame({"text": lines}).with_row_index("idx")
    n = df.height
    # the CSV splitter gives empty lines as null; whitespace-only lines are rare
    blank = df["text"].is_null() | df["text"].str.contains(r"^[ \t\r]*$")
    stats.blank = int(blank.sum())
    masks = df.select(
        [
            (
                pl.col("text").str.contains(f.literal, literal=True)
                if f.literal
                else pl.col("text").is_not_null()
            )
            .fill_null(False)
            .alias(str(i))
            for i, f in enumerate(cat.formats)
        ]
    )
    taken = (
        pl.Series("taken", [False] * n, dtype=pl.Boolean) if n else pl.Series([], dtype=pl.Boolean)
    )
    matched: list[tuple[Format, pl.DataFrame]] = []
    for i, fmt in enumerate(cat.formats):
        cand = df.filter(masks[str(i)] & ~taken)
        if cand.height == 0:
            continue
        ok = _match(cand, fmt)
        if ok.height == 0:
            continue
        taken = taken.scatter(ok["idx"], True)
        matched.append((fmt, ok))

    used: list[int] = []
    parts = []
    for fmt, ok in matched:
        if fmt.multiline:
            ok, att = _multiline(df, ok, taken, cat, fmt, stats)
            used += att
        stats.matched[fmt.name] = stats.matched.get(fmt.name, 0) + ok.height
        parts.append(_fields(ok, fmt))

    consumed = taken.scatter(used, True) if used else taken
    rest = df.filter(~consumed & ~blank)
    stats.unmatched = rest.height
    stats.unmatched_samples = [
        (first_line + i, t[:300]) for i, t in rest.head(UNMATCHED_SAMPLES).iter_rows()
    ]

    schema = cat.schema()
    if not parts:
        return pl.DataFrame(schema=schema), stats
    events = pl.concat(parts, how="diagonal_relaxed").sort("idx")
    events = _prefix_columns(events, cat).with_columns(
        pl.lit(file, dtype=pl.String).alias("file"),
        (pl.col("idx").cast(pl.Int64) + first_line).alias("line"),
        ((pl.col("idx") == n - 1) & pl.lit(last_line_cut)).alias("truncated"),
    )
    return events.select(
        [
            pl.col(c).cast(t) if c in events.columns else pl.lit(None, dtype=t).alias(c)
            for c, t in schema.items()
        ]
    ), stats
