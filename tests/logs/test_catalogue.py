"""Every sample line of every catalogue file parses to exactly its expected fields."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from kvforensics.errors import InputError
from kvforensics.logs import load_catalogue, read_events
from kvforensics.logs.forms import BASE_COLUMNS
from kvforensics.logs.samples import format_sample_problems, prefix_sample_problems

CAT = load_catalogue()
FIELDS = set(CAT.field_types())


def _samples():
    for fmt in CAT.formats:
        for i, s in enumerate(fmt.samples):
            yield pytest.param(fmt, s, id=f"{Path(fmt.source).name}:{fmt.name}:{i}")


def _parse_one(tmp_path: Path, text: str, formats=None):
    p = tmp_path / "one.log"
    p.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    return read_events([p], extra_formats=formats)


@pytest.mark.parametrize(("fmt", "sample"), list(_samples()))
def test_format_sample(tmp_path, fmt, sample):
    assert format_sample_problems(CAT, fmt, sample) == []
    # the same through the file reader (chunking, line splitting)
    df, summary = _parse_one(tmp_path, sample["line"])
    assert df.height == 1, df
    assert df["kind"][0] == fmt.kind
    assert summary.unmatched == 0


def test_every_format_has_samples():
    for f in CAT.formats:
        assert f.samples, f"{f.name} has no sample lines"


@pytest.mark.parametrize("sample", list(CAT.prefix.samples), ids=lambda s: s["line"][:40])
def test_prefix_sample(tmp_path, sample):
    assert prefix_sample_problems(CAT, sample) == []
    # the prefix seen through a real event
    line = sample["line"].replace("] x", "] AttentionStore write: rid=r, blocks=1, block_size=256")
    df, _ = _parse_one(tmp_path, line)
    row = df.row(0, named=True)
    exp = sample["expect"]
    if "time" in exp:
        assert row["time"] == datetime.strptime(exp["time"], "%Y-%m-%d %H:%M:%S.%f")
    else:
        assert row["time"] is None
    assert row["rank"] == exp["rank"]
    for col in ("dp", "pp", "attn_cp", "moe_dp", "tp", "ep"):
        assert row[col] == exp.get(col), col


def test_columns_have_one_type_and_no_clash():
    schema = CAT.schema()
    assert list(schema)[: len(BASE_COLUMNS)] == list(BASE_COLUMNS)
    assert {"rid", "seq_len", "baseline", "oom_tokens", "rids", "extra", "attached"} <= set(schema)


USER_TOML = """
[[format]]
name = "kv_transfer"
literal = "KV transfer done"
regex = '^KV transfer done: rid=(?P<rid>[^,]+), elapsed=(?P<elapsed_s>[0-9.]+)s'
fields = { rid = "str", elapsed_s = "float" }

[[format]]
name = "as_write"
literal = "AS ckpt"
regex = '^AS ckpt rid=(?P<rid>\\S+) n=(?P<blocks>\\d+)'
fields = { rid = "str", blocks = "int" }
"""


def test_user_formats_add_and_override(tmp_path):
    user = tmp_path / "mine.toml"
    user.write_text(USER_TOML)
    log = (
        "[2026-11-02 15:16:27 PP0] KV transfer done: rid=as-1, elapsed=0.25s\n"
        "[2026-11-02 15:16:27 PP0] AS ckpt rid=as-2 n=7\n"
        "[2026-11-02 15:16:27 PP0] AttentionStore write: rid=as-3, blocks=1, block_size=256\n"
    )
    df, s = _parse_one(tmp_path, log, formats=[user])
    assert df["kind"].to_list() == ["kv_transfer", "as_write"]
    assert df["elapsed_s"].to_list()[0] == 0.25
    assert df["blocks"].to_list()[1] == 7
    assert s.unmatched == 1  # the built-in as_write wording was replaced


@pytest.mark.parametrize(
    ("text", "msg"),
    [
        ("not toml [[", "not valid TOML"),
        ("[[format]]\nname='a'\nregex='(unclosed'\n", "invalid regex"),
        # the engine's message spans lines: the one line keeps what is wrong
        ("[[format]]\nname='a'\nregex='(?P<rid>'\n", "invalid regex: .*unclosed group"),
        ("[[format]]\nname='a'\nregex='^x (?P<n>\\d+)'\nfields={n='decimal'}\n", "needs a type"),
        ("[[format]]\nname='a'\nregex='^x (?P<n>\\d+)'\nfields={m='int'}\n", "no group"),
        (
            "[[format]]\nname='a'\nregex='^x (?P<seq_len>\\w+)'\nfields={seq_len='str'}\n",
            "one column needs one type",
        ),
        ("x = 1\n", "no [[format]]"),
    ],
)
def test_bad_user_formats(tmp_path, text, msg):
    user = tmp_path / "bad.toml"
    user.write_text(text)
    with pytest.raises(InputError, match=msg.replace("[", r"\[")):
        load_catalogue([user])
