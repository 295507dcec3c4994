"""Lines -> typed events, vectorised: one polars pass per catalogue entry, no per-line Python.

A chunk always starts at a prefixed line and holds whole multi-line messages (the
reader guarantees it), so this stage needs no state from earlier chunks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import polars as pl

from kvforensics.clip import clip
from kvforensics.logs.forms import Catalogue, FieldSpec, Format
from kvforensics.logs.sanity import SATURATED, split_unreadable
from kvforensics.logs.wrapper import Wrapper

# An OOM tree dump can run to megabytes; the event keeps its head, the rest is counted.
MAX_ATTACHED_CHARS = 1 << 20
UNMATCHED_SAMPLES = 5
#: characters of an unmatched line kept as its sample (cut at a word)
SAMPLE_CHARS = 300
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
    prefixed: int = 0  # lines with a line prefix: the file is a scheduler log
    unreadable: int = 0
    unreadable_samples: list[tuple[int, str]] = field(default_factory=list)


def _convert(expr: pl.Expr, fs: FieldSpec, lenient: bool) -> pl.Expr:
    """Text -> the field's type. `lenient` values come from free text (`12.31 GB`,
    `'prefill'`, `None`), so numbers are read from the leading digits and quotes dropped."""
    if fs.type == "str":
        if lenient:  # `'prefill'` -> prefill; a quote that closes a sentence stays
            out = expr.str.strip_chars()
            quoted = out.str.contains(r"^(?:'.*'|\".*\")$")
            out = pl.when(quoted).then(out.str.slice(1, out.str.len_chars() - 2)).otherwise(out)
        else:
            out = expr
        return pl.when(out != "None").then(out)
    if fs.type in ("int", "float"):
        if lenient:
            expr = expr.str.extract(_NUMBER, 1)
        if fs.type == "int":
            # "16384.0" is an int written by a float formatter; never silently truncate.
            # Digits beyond 64 bits saturate rather than vanish as null, so that the
            # sanity rules (logs/sanity.py) see the line and call it unreadable.
            val = expr.cast(pl.Int64, strict=False)
            wide = expr.str.contains(r"^[-+]?\d{19,}$") & val.is_null()
            return pl.when(wide).then(pl.lit(SATURATED, dtype=pl.Int64)).otherwise(val)
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
    value = (
        r"[-+]?(?:[0-9]+(?:\.[0-9]+)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
        if numeric
        else rf"'[^']*'|\"[^\"]*\"|\[[^\]]*\]|{_value_text(pairs_sep)}"
    )
    return rf"(?:^|{re.escape(pairs_sep)}){re.escape(key)}{re.escape(assign)}\s*({value})"


def _value_text(sep: str) -> str:
    """A value up to the next separator. With `, ` that is "no comma" (as it always was);
    with `. ` (the 2024 batch line) a dot not followed by a space is part of the value
    (`80.81%`), since the regex engine has no look-ahead."""
    stop = re.escape(sep[:1] or ",")
    if sep[:1] == "." and len(sep) > 1:
        return rf"(?:[^.]|\.[^{re.escape(sep[1])}])*"
    return rf"[^{stop}]*"


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
    p = fmt.key_pairs()
    known = sorted({k for fs in fmt.fields for k in fs.keys}, key=len, reverse=True)
    cut = (
        rf"(?:^|{re.escape(p.sep)})(?:{'|'.join(re.escape(k) for k in known)})"
        rf"{re.escape(p.assign)}{_value_text(p.sep)}"
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


def starts_message(text: pl.Series, cat: Catalogue) -> pl.Series:
    """Lines with the prefix that start a message (not a wrapper-prefixed continuation)."""
    out = text.str.contains(cat.prefix.regex).fill_null(False)
    if cat.prefix.continues:
        rest = text.str.replace(cat.prefix.regex, "")
        out = out & ~rest.str.contains(cat.prefix.continues).fill_null(False)
    return out


def _fields(ok: pl.DataFrame, fmt: Format) -> pl.DataFrame:
    """Typed field columns for rows that matched `fmt` (`_g` = the line regex's groups).

    `key: value` pairs are split rather than searched key by key when the rows allow
    it (see `_pairs_split`); the rows that do not go through the per-key regexes."""
    if fmt.pairs is None or ok.height == 0 or "body" in ok.columns or not _splittable(fmt):
        return _fields_regex(ok, fmt)
    fast, slow, need_extra = _pairs_split(ok, fmt)
    parts = []
    if slow.any():
        parts.append(_fields_regex(ok.filter(slow), fmt))
    keep = ~slow
    plain = keep & ~need_extra if fmt.pairs.extra else keep
    parts.append(_pairs_out(ok.filter(plain), fast.filter(plain), fmt))
    if fmt.pairs.extra and (keep & need_extra).any():
        sub = ok.filter(keep & need_extra)
        out = _pairs_out(sub, fast.filter(keep & need_extra), fmt)
        extra = _extra(sub, fmt, pl.col("_g").struct.field(fmt.pairs.group))
        parts.append(out.with_columns(extra))
    parts = [p for p in parts if p.height]
    if not parts:
        return _fields_regex(ok, fmt)
    return pl.concat(parts, how="diagonal_relaxed") if len(parts) > 1 else parts[0]


def _pairs_out(ok: pl.DataFrame, fast: pl.DataFrame, fmt: Format) -> pl.DataFrame:
    """Rows of a pairs format whose fields came from splitting; same columns as the regex path."""
    out = pl.concat([ok.select("idx", "text"), fast], how="horizontal")
    return out.with_columns(pl.lit(fmt.kind).alias("kind"))


def _splittable(fmt: Format) -> bool:
    """Fields can be read by splitting when every field is a key lookup and no key holds
    the separator or the assignment text (so an item's key is the text before `assign`)."""
    p = fmt.key_pairs()
    if not p.sep or not p.assign:
        return False
    if not all(fs.keys and not fs.group and fs.type != "list" for fs in fmt.fields):
        return False
    return all(k and p.sep not in k and p.assign not in k for fs in fmt.fields for k in fs.keys)


_FLOAT_TEXT = r"^[-+]?[0-9.]+(?:[eE][-+]?[0-9]+)?$"


def _pairs_split(ok: pl.DataFrame, fmt: Format) -> tuple[pl.DataFrame, pl.Series, pl.Series]:
    """Key fields of a pairs format by one split into `key assign value` items.

    Returns (typed field columns, rows to redo with the per-key regexes, rows with
    items that are not known keys). A row is redone when a key's first occurrence
    holds a value the split cannot read exactly as the regex would (not a plain number
    for a number field; quotes, brackets or commas for others). Rows with unknown items
    get `extra` from `_extra`, the others have none (the regex path would cut all)."""
    p = fmt.key_pairs()
    n = ok.height
    keys = list(dict.fromkeys(k for fs in fmt.fields for k in fs.keys))
    code = {k: i for i, k in enumerate(keys)}
    items = (
        ok.select(pl.col("_g").struct.field(p.group).str.split(p.sep).alias("item"))
        .with_row_index("row")
        .explode("item")
    )
    kv = pl.col("item").str.splitn(p.assign, 2)
    items = items.select(
        "row",
        kv.struct.field("field_0")
        .replace_strict(code, default=None, return_dtype=pl.Int32)
        .alias("code"),
        kv.struct.field("field_1").alias("v"),
        pl.col("item").fill_null(""),
    )
    items = items.with_columns(
        pl.when(pl.col("v").is_not_null()).then(pl.col("code")).alias("code")
    )
    unknown = items.filter(pl.col("code").is_null() & (pl.col("item") != ""))["row"]
    known = items.filter(pl.col("code").is_not_null()).select("row", "code", "v")
    if known.height:
        pv = known.pivot(on="code", index="row", values="v", aggregate_function="first")
    else:
        pv = pl.DataFrame({"row": pl.Series([], dtype=pl.UInt32)})
    if pv.height != n or not pv["row"].is_sorted():  # rows without any known key
        pv = pl.DataFrame({"row": pl.arange(0, n, dtype=pl.UInt32, eager=True)}).join(
            pv, on="row", how="left", maintain_order="left"
        )
    exprs, goods = [], []
    for fs in fmt.fields:
        present = [pl.col(str(code[k])) for k in fs.keys if str(code[k]) in pv.columns]
        if not present:
            exprs.append(pl.lit(None, dtype=fs.dtype).alias(fs.name))
            continue
        raw = pl.coalesce(present) if len(present) > 1 else present[0]
        if fs.type in ("int", "float"):
            val = raw.cast(fs.dtype, strict=False)
            good = val.is_not_null()
            if fs.type == "float":
                good = good & raw.str.contains(_FLOAT_TEXT)
        else:
            val = _convert(raw, fs, lenient=True)
            good = ~raw.str.contains_any([",", "'", '"', "["])
        exprs.append(val.alias(fs.name))
        goods.append(raw.is_null() | good)
    slow = pl.lit(False) if not goods else ~pl.all_horizontal(goods)
    out = pv.select(*exprs, slow.fill_null(True).alias("__slow"))
    need_extra = pl.Series("extra", [False] * n, dtype=pl.Boolean)
    if unknown.len():
        need_extra = need_extra.scatter(unknown.unique(), True)
    return out.drop("__slow"), out["__slow"], need_extra


def _fields_regex(ok: pl.DataFrame, fmt: Format) -> pl.DataFrame:
    groups = pl.col("_g")
    body = pl.col("body") if "body" in ok.columns else pl.col("text")
    exprs: list[pl.Expr] = []
    for fs in fmt.fields:
        if fs.group:
            raw, lenient = groups.struct.field(fs.group), False
        elif fs.keys:
            pairs = fmt.key_pairs()
            src = groups.struct.field(pairs.group)
            numeric = fs.type in ("int", "float")
            raw = pl.coalesce(
                [
                    src.str.extract(_key_regex(pairs.sep, pairs.assign, k, numeric), 1)
                    for k in fs.keys
                ]
            )
            lenient = not numeric
        else:
            raw, lenient = pl.coalesce([body.str.extract(rx, 1) for rx in fs.regexes]), True
        exprs.append(_convert(raw, fs, lenient).alias(fs.name))
    keep = [c for c in ("attached",) if c in ok.columns]
    out = ok.select("idx", "text", *keep, *exprs, pl.lit(fmt.kind).alias("kind"))
    if fmt.pairs is not None and fmt.pairs.extra:
        out = out.with_columns(_extra(ok, fmt, groups.struct.field(fmt.pairs.group)))
    return out


def _multiline(
    df: pl.DataFrame,
    heads: pl.DataFrame,
    taken: pl.Series,
    prefixed: pl.Series,
    fmt: Format,
    prefix_re: re.Pattern[str],
    strip_prefix: bool = False,
) -> tuple[pl.DataFrame, list[int], list[int]]:
    """Attach to each head line the unprefixed, unmatched lines after it (and an `absorb`
    line right after those, with its own continuation lines, even when another multi-line
    format read it as its head). Returns heads with `body` (whole message) and `attached`,
    the line indices used, and the absorbed heads (no longer events of their own)."""
    boundary = prefixed | taken
    group = boundary.cast(pl.Int64).cum_sum()
    g = pl.DataFrame({"idx": df["idx"], "text": df["text"], "group": group, "prefixed": prefixed})
    head_groups = g["group"].gather(heads["idx"])
    rows = g.filter(pl.col("group").is_in(pl.concat([head_groups, head_groups + 1]).to_list()))
    by_group = {k[0]: v for k, v in rows.partition_by("group", as_dict=True).items()}
    bodies, attached, used, swallowed = [], [], [], []
    for gid in head_groups.to_list():
        own = by_group[gid]
        lines = own["text"].fill_null("").to_list()
        if strip_prefix:  # continuation lines carry a wrapper's prefix: the message is after it
            lines = lines[:1] + [prefix_re.sub("", x, count=1) for x in lines[1:]]
        used += own["idx"].to_list()[1:]
        nxt = by_group.get(gid + 1)
        if nxt is not None and fmt.absorb and _absorbs(nxt.row(0, named=True), fmt, prefix_re):
            lines += nxt["text"].fill_null("").to_list()
            used += nxt["idx"].to_list()
            swallowed.append(nxt["idx"][0])
        rest = "\n".join(lines[1:])
        if len(rest) > MAX_ATTACHED_CHARS:
            kept = rest[:MAX_ATTACHED_CHARS].rsplit("\n", 1)[0]
            dropped = rest.count("\n") - kept.count("\n")
            rest = f"{kept}\n[kvforensics: {dropped} more lines not kept]"
        bodies.append("\n".join(lines[:1] + ([rest] if rest else [])))
        attached.append(rest or None)
    out = heads.with_columns(
        pl.Series("body", bodies, dtype=pl.String), pl.Series("attached", attached, dtype=pl.String)
    )
    return out, used, swallowed


def _absorbs(head: dict[str, Any], fmt: Format, prefix_re: re.Pattern[str]) -> bool:
    text = head["text"] or ""
    m = prefix_re.match(text)
    return bool(head["prefixed"]) and m is not None and any(
        text[m.end() :].startswith(a) for a in fmt.absorb
    )


@lru_cache(maxsize=16)
def _compiled(regex: str) -> re.Pattern[str]:
    return re.compile(regex)


def _drop_nested(
    matched: list[tuple[Format, pl.DataFrame]], taken: pl.Series, prefixed: pl.Series
) -> tuple[list[tuple[Format, pl.DataFrame]], pl.Series]:
    """Heads that are copies quoted inside a multi-line message open above them (a
    traceback's `RuntimeError: Prefill out of memory...`) stop being heads, so that the
    message owns them and one out-of-memory stays one event."""
    quoted: list[tuple[int, int]] = []  # (line, format position)
    for k, (fmt, ok) in enumerate(matched):
        if fmt.nested:
            hit = ok.filter(pl.col("text").str.contains(fmt.nested).fill_null(False))
            quoted += [(i, k) for i in hit["idx"].to_list() if not prefixed[i]]
    if not quoted:
        return matched, taken
    multi = {i for fmt, ok in matched if fmt.multiline for i in ok["idx"].to_list()}
    boundary = (prefixed | taken).to_list()
    dropped: dict[int, set[int]] = {}
    for i, k in sorted(quoted):
        j = i - 1
        while j >= 0 and not boundary[j]:
            j -= 1
        if j >= 0 and j in multi:
            boundary[i] = False
            multi.discard(i)
            dropped.setdefault(k, set()).add(i)
    if not dropped:
        return matched, taken
    out = []
    for k, (fmt, ok) in enumerate(matched):
        if k in dropped:
            ok = ok.filter(~pl.col("idx").is_in(sorted(dropped[k])))
        out.append((fmt, ok))
    gone = sorted(i for d in dropped.values() for i in d)
    return out, taken.scatter(gone, False)


def _promote(
    bodies: list[tuple[Format, pl.DataFrame]], swallowed: list[int], cat: Catalogue
) -> list[tuple[Format, pl.DataFrame]]:
    """Drop heads absorbed into another message; move events whose whole message matches
    their format's `promote` regex to that format (a scheduler exception whose traceback
    is an out-of-memory is that out-of-memory)."""
    by_name = {f.name: f for f in cat.formats}
    out: dict[str, list[Any]] = {}
    for fmt, ok in bodies:
        if swallowed:
            ok = ok.filter(~pl.col("idx").is_in(swallowed))
        if fmt.promote and ok.height and fmt.promote[0] in by_name:
            body = pl.col("body") if "body" in ok.columns else pl.col("text")
            up = body.str.contains(fmt.promote[1]).fill_null(False)
            target = by_name[fmt.promote[0]]
            moved = ok.filter(up)
            if moved.height:
                if "body" not in moved.columns:
                    moved = moved.with_columns(pl.col("text").alias("body"))
                out.setdefault(target.name, [target, []])[1].append(moved.drop("_g"))
            ok = ok.filter(~up)
        out.setdefault(fmt.name, [fmt, []])[1].append(ok)
    return [
        (fmt, pl.concat(frames, how="diagonal_relaxed") if len(frames) > 1 else frames[0])
        for fmt, frames in out.values()
    ]


def _drop_cut_pair(ok: pl.DataFrame, fmt: Format, cut: int) -> pl.DataFrame:
    """On a line cut short, the last `key: value` pair may be cut too (`token usage: 0`
    from `0.9`): it is dropped, so that its field reads null rather than a wrong number."""
    if fmt.pairs is None or not ok.height or cut not in set(ok["idx"].to_list()):
        return ok
    sep = re.escape(fmt.pairs.sep)
    end = re.escape(fmt.pairs.sep.rstrip() or fmt.pairs.sep)
    g = fmt.pairs.group
    # `..., #new-token: 8192,` was cut after a separator: its last pair is whole
    whole = pl.field(g).str.contains(rf"{end}\s*$")
    fixed = pl.field(g).str.replace(rf"^(.*){sep}.*$", "$1")
    fixed = (
        pl.when(whole)
        .then(pl.field(g))
        .when(pl.field(g).str.contains(sep))
        .then(fixed)
        .otherwise(pl.lit(""))
    )
    return ok.with_columns(
        pl.when(pl.col("idx") == cut)
        .then(pl.col("_g").struct.with_fields(fixed.alias(g)))
        .otherwise(pl.col("_g"))
        .alias("_g")
    )


def prefix_columns(events: pl.DataFrame, cat: Catalogue) -> pl.DataFrame:
    """`events` (with the line `text`) plus time, clock, time_has_ms, rank and the rank
    tag columns read off the catalogue's prefix."""
    pre = events.select(pl.col("text").str.extract_groups(cat.prefix.regex)).unnest("text")
    names = [n for n in ("time", "ms", "rank") if n in pre.columns]
    if not names:  # a prefix without a time or a rank: every line alike
        pre = pl.DataFrame({"time": pl.Series([None] * events.height, dtype=pl.String)})
        names = ["time"]
    # Consecutive lines mostly share their prefix (one a second and rank): the times and
    # tags are decoded once per run of equal prefixes and spread back over the run.
    groups = pre.select(names)
    changed = pl.any_horizontal(pl.col(n).ne_missing(pl.col(n).shift(1)) for n in names)
    first = pl.int_range(pl.len()) == 0
    run = groups.select((changed | first).alias("_run"))["_run"]
    values = _prefix_values(groups.filter(run), cat)
    return events.with_columns(values[run.cast(pl.Int64).cum_sum() - 1])


def _prefix_values(groups: pl.DataFrame, cat: Catalogue) -> pl.DataFrame:
    """The prefix's columns for each row of its regex's groups (``time``, ``ms``, ``rank``)."""
    n = groups.height

    def group(name: str) -> pl.Series:
        return groups[name] if name in groups.columns else pl.Series([None] * n, dtype=pl.String)

    stamp, ms = group("time").str.strip_chars(), group("ms")
    tags = group("rank").str.strip_chars(" []")
    clock_only = stamp.str.contains(r"^[0-9]{1,2}:[0-9]{2}:[0-9]{2}$").fill_null(False)
    ms_int = ms.cast(pl.Int64, strict=False).fill_null(0)
    time = stamp.str.to_datetime(cat.prefix.time_format, time_unit="ms", strict=False)
    time = pl.select(pl.when(~clock_only).then(time)).to_series()
    clock = stamp.str.to_time("%H:%M:%S", strict=False)
    clock = pl.select(pl.when(clock_only).then(clock).otherwise(time.dt.time())).to_series()
    cols = [
        # (polars takes a Series as a duration's part; its stub says Expr)
        (time + pl.duration(milliseconds=ms_int)).alias("time"),  # type: ignore[arg-type]
        (clock.cast(pl.Int64) + ms_int * 1_000_000).cast(pl.Time).alias("clock"),
        (ms.is_not_null() & stamp.is_not_null()).alias("time_has_ms"),
        tags.fill_null("").alias("rank"),
    ]
    # a chunk holds a handful of distinct tag strings: decode those, then map
    tag_re = {
        col: re.compile(rf"(?:^|[ ,]){re.escape(tag)}([0-9]+)")
        for tag, col in cat.prefix.tags.items()
    }
    uniq = [u for u in tags.unique().to_list() if u]
    for col, rx in tag_re.items():
        # a rank number past 9 digits is damage, not a rank: left without one
        table = {u: int(m.group(1)) for u in uniq if (m := rx.search(u)) and len(m.group(1)) < 10}
        cols.append(tags.replace_strict(table, default=None, return_dtype=pl.Int64).alias(col))
    return pl.select(cols)


_TAIL_GROUP = re.compile(r"(?s)(?P<head>.*)\(\?P<(?P<g>[A-Za-z_][A-Za-z0-9_]*)>\.\*\)")


@lru_cache(maxsize=256)
def _tail_split(line_regex: str) -> tuple[str, str] | None:
    """(head regex, group) when the line regex is `head(?P<group>.*)` with no other group
    but `__m` and a head that cannot match empty text. Lines hold no newline, so the group
    is the text after head's match: one replace instead of a capture over the line."""
    m = _TAIL_GROUP.fullmatch(line_regex)
    if not m or m.group("head").endswith("\\"):
        return None
    head = m.group("head")
    if re.findall(r"\(\?P?<", head) != ["(?P<"] or "(?P<__m>)" not in head:
        return None
    try:
        if pl.Series([""]).str.contains(head).any():
            return None
    except Exception:  # polars' engine rejects it on its own: keep the regex path
        return None
    return head, m.group("g")


def _match(cand: pl.DataFrame, fmt: Format) -> pl.DataFrame:
    """Rows of `cand` that match `fmt`, with `_g` = struct of the regex's groups."""
    tail = _tail_split(fmt.line_regex)
    if tail is not None:
        head, group = tail
        rest = pl.col("text").str.replace(head, "")
        g = cand.with_columns(rest.alias("_rest")).filter(
            pl.col("_rest").str.len_bytes() < pl.col("text").str.len_bytes()
        )
        return g.with_columns(
            pl.struct(pl.lit("", dtype=pl.String).alias("__m"), pl.col("_rest").alias(group)).alias(
                "_g"
            )
        ).drop("_rest")
    g = cand.with_columns(pl.col("text").str.extract_groups(fmt.line_regex).alias("_g"))
    return g.filter(pl.col("_g").struct.field("__m").is_not_null())


def _match_all(
    df: pl.DataFrame, cat: Catalogue
) -> tuple[list[tuple[Format, pl.DataFrame]], pl.Series]:
    """Each line to the first format that matches it (a literal pre-filter first). Lines
    already read leave the frame, so later formats scan only what is left."""
    n = df.height
    taken = (
        pl.Series("taken", [False] * n, dtype=pl.Boolean) if n else pl.Series([], dtype=pl.Boolean)
    )
    rest = df.filter(pl.col("text").is_not_null())
    matched: list[tuple[Format, pl.DataFrame]] = []
    for fmt in cat.formats:
        if rest.height == 0:
            break
        cand = (
            rest.filter(pl.col("text").str.contains(fmt.literal, literal=True))
            if fmt.literal
            else rest
        )
        if cand.height == 0:
            continue
        ok = _match(cand, fmt)
        if ok.height == 0:
            continue
        taken = taken.scatter(ok["idx"], True)
        matched.append((fmt, ok))
        rest = rest.filter(~pl.col("idx").is_in(ok["idx"].implode()))
    return matched, taken


def _messages(
    df: pl.DataFrame,
    matched: list[tuple[Format, pl.DataFrame]],
    taken: pl.Series,
    prefixed: pl.Series,
    cat: Catalogue,
) -> tuple[list[tuple[Format, pl.DataFrame]], list[int]]:
    """Multi-line events with their lines attached, absorbed heads dropped, promotions
    made; and the line indices the messages used."""
    used: list[int] = []
    swallowed: list[int] = []
    bodies = []
    prefix_re = _compiled(cat.prefix.regex)
    for fmt, ok in matched:
        if fmt.multiline:
            strip = bool(cat.prefix.continues)
            ok, att, sw = _multiline(df, ok, taken, prefixed, fmt, prefix_re, strip)
            used += att
            swallowed += sw
        bodies.append((fmt, ok))
    return _promote(bodies, swallowed, cat), used


def extract_chunk(
    lines: pl.Series,
    first_line: int,
    file: str,
    cat: Catalogue,
    last_line_cut: bool = False,
    wrapper: Wrapper | None = None,
) -> tuple[pl.DataFrame, ChunkStats]:
    """Events of one chunk of lines (`first_line` = 1-based number of its first line),
    read behind the file's `wrapper` when it has one."""
    stats = ChunkStats(lines=len(lines))
    wrap_times = None
    if wrapper is not None:
        lines, wrap_times = wrapper.strip(lines)
    df = pl.DataFrame({"text": lines}).with_row_index("idx")
    n = df.height
    # the CSV splitter gives empty lines as null; whitespace-only lines are rare
    blank = df["text"].is_null() | df["text"].str.contains(r"^[ \t\r]*$")
    stats.blank = int(blank.sum())
    matched, taken = _match_all(df, cat)
    prefixed = starts_message(df["text"], cat)
    stats.prefixed = int(prefixed.sum())
    matched, taken = _drop_nested(matched, taken, prefixed)
    if last_line_cut and n:
        matched = [(fmt, _drop_cut_pair(ok, fmt, n - 1)) for fmt, ok in matched]
    events_by_format, used = _messages(df, matched, taken, prefixed, cat)
    parts = []
    for fmt, ok in events_by_format:
        if ok.height:  # counted by kind: several formats may read one kind
            stats.matched[fmt.kind] = stats.matched.get(fmt.kind, 0) + ok.height
            parts.append(_fields(ok, fmt))
    stats.attached += len(set(used))

    consumed = taken.scatter(sorted(set(used)), True) if used else taken
    rest = df.filter(~consumed & ~blank)
    stats.unmatched = rest.height
    stats.unmatched_samples = [
        (first_line + i, clip(t, SAMPLE_CHARS)) for i, t in rest.head(UNMATCHED_SAMPLES).iter_rows()
    ]

    schema = cat.schema()
    if not parts:
        return pl.DataFrame(schema=schema), stats
    # prefix fields before the sort, so that the line text is not carried through it
    events = pl.concat(parts, how="diagonal_relaxed")
    events = prefix_columns(events, cat).drop("text").sort("idx")
    if wrap_times is not None:
        events = _wrapper_times(events, wrap_times)
    events = events.with_columns(
        pl.lit(file, dtype=pl.String).alias("file"),
        (pl.col("idx").cast(pl.Int64) + first_line).alias("line"),
        ((pl.col("idx") == n - 1) & pl.lit(last_line_cut)).alias("truncated"),
    )
    events = events.select(
        [
            pl.col(c).cast(t) if c in events.columns else pl.lit(None, dtype=t).alias(c)
            for c, t in schema.items()
        ]
    )
    return _drop_unreadable(events, cat, stats), stats


def _wrapper_times(events: pl.DataFrame, times: pl.DataFrame) -> pl.DataFrame:
    """The wrapper's time where SGLang's own prefix gives none."""
    w = times.with_row_index("idx").with_columns(pl.col("idx").cast(events["idx"].dtype))
    ev = events.join(w, on="idx", how="left", maintain_order="left")
    own = pl.col("time").is_not_null()
    return ev.with_columns(
        pl.coalesce("time", "_wtime").alias("time"),
        pl.when(own).then(pl.col("time_has_ms")).otherwise(pl.col("_wms").fill_null(False)),
        pl.coalesce("clock", "_wclock").alias("clock"),
    ).drop("_wtime", "_wms", "_wclock")


def _drop_unreadable(events: pl.DataFrame, cat: Catalogue, stats: ChunkStats) -> pl.DataFrame:
    fields = {fs.name: fs.type for f in cat.formats for fs in f.fields}
    ints = [n for n, t in fields.items() if t == "int"]
    floats = [n for n, t in fields.items() if t == "float"]
    kept, bad = split_unreadable(events, ints, floats)
    if bad.height:
        stats.unreadable = bad.height
        for kind, n in bad.group_by("kind").len().iter_rows():
            stats.matched[kind] -= n
            if not stats.matched[kind]:
                del stats.matched[kind]
        stats.unreadable_samples = [
            (n, f"{kind}: {why}")
            for n, kind, why in bad.select("line", "kind", "why").head(UNMATCHED_SAMPLES).iter_rows()
        ]
    return kept
