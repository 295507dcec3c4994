"""Scenarios and ledgers are checked against a schema: one line naming the field's path."""

import pytest

from tests.conftest import FIXTURES
from tests.reliability._run import run_cli

INCIDENT = FIXTURES / "scenarios" / "incident-2026-11-02.toml"
TEXT = INCIDENT.read_text()


def _scenario(tmp_path, old, new, name="s.toml"):
    assert old in TEXT
    path = tmp_path / name
    path.write_text(TEXT.replace(old, new, 1))
    return path


@pytest.mark.parametrize(
    ("old", "new", "says"),
    [
        ("free = 98304", 'free = "abc"', "pool.free: Input should be a valid integer"),
        ("first_round = 0", "first_round = 0\nwaiting = [1, 2]", "waiting"),
        ("prefix_len = 12992", "prefix_len = [1, 2]", "waiting[1].prefix_len"),
        ('rid = "as-v9ujq2m0c1"\n', "", "waiting[0].rid: Field required"),
        ("first_round = 0", 'first_round = 0\nprofile = "nope"', "profile: unknown profile"),
        ("evictable = 23104", "evictable = 99999999", "exceed config.pool_size"),
        ("seq_len = 13888", f"seq_len = {2**70}", "waiting[0].seq_len"),
        ("seq_len = 13888", "seq_len = 13888\narrival = nan", "finite number"),
        ("seq_len = 13888", "seq_len = 13888\narrival = inf", "finite number"),
        ("done_at = 3.5", "done_at = -3.5", "inflight[0].done_at"),
        ("page_size = 64", "page_size = 0", "config.page_size: 0 must be positive"),
        ("align_size = 256", "align_size = 100", "multiple of page_size"),
        ("first_round = 0", "first_round = 0\nfirts_round = 1", "firts_round: unknown key"),
        ("host_hit_len = 73792", "host_hit_len = 93792", "must leave at least one token"),
        # the [config] table is model.Config's own fields: its types, defaults and kinds
        ("page_size = 64", 'page_size = "64"', "config.page_size: Input should be a valid int"),
        ("pool_size = 262144\n", "", "config.pool_size: Field required"),
        ('cache_kind = "hybrid"', 'cache_kind = "lru"', "config.cache_kind: Input should be"),
        ("max_new_tokens = 1", "max_new_token = 1", "config.max_new_token: unknown key"),
        ("max_new_tokens = 1", "max_new_tokens = 1.5", "config.max_new_tokens: Input should"),
    ],
)
def test_bad_scenario_is_one_line_naming_the_field(tmp_path, old, new, says):
    path = _scenario(tmp_path, old, new)
    for args in (("simulate", path), ("explain", path, "--round", "0"), ("diff", path)):
        out = run_cli(*args)
        assert out.code == 2, (args, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and says in lines[0] and str(path) in lines[0], lines


def test_trace_that_is_a_directory_or_not_text(tmp_path):
    head = TEXT.split("[[waiting]]")[0].split("[pool]")[0]
    for target, says in [(tmp_path, "is a directory"), (tmp_path / "t.jsonl", "not UTF-8")]:
        (tmp_path / "t.jsonl").write_bytes(b'\xff\xfe{"timestamp": 1}\n')
        path = tmp_path / "s.toml"
        path.write_text(head + f'[trace]\nfile = "{target}"\n')
        out = run_cli("simulate", path)
        assert out.code == 2 and says in out.stderr, out.stderr


def test_scenario_needing_too_many_rounds_is_refused(tmp_path):
    path = _scenario(tmp_path, "chunked_prefill_size = 16384", "chunked_prefill_size = 64")
    path.write_text(
        path.read_text()
        .replace("max_prefill_tokens = 16384", "max_prefill_tokens = 64")
        .replace("seq_len = 13888", f"seq_len = {2**26}")
    )
    out = run_cli("simulate", path)
    assert out.code == 2 and "rounds" in out.stderr and "at most" in out.stderr, out.stderr


def _ledger(tmp_path):
    path = tmp_path / "l.csv"
    assert run_cli("simulate", INCIDENT, "--ledger", path).code == 0
    return path


def test_ledger_rows_are_checked(tmp_path):
    good = _ledger(tmp_path)
    text = good.read_text()
    header, first, rest = text.split("\n", 2)
    cases = {
        "dup.csv": (header + "\n" + text, "row 1, column round"),
        "abc.csv": (
            header + "\n" + first.replace("prefix,0,", "prefix,abc,", 1) + "\n" + rest,
            "row 1, column round",
        ),
        "cut.csv": (header.replace(",reason", "") + "\n", "missing columns: reason"),
    }
    assert run_cli("diff", good, "--policy", "prefix,fixed").code == 0
    for name, (body, says) in cases.items():
        path = tmp_path / name
        path.write_text(body)
        for args in (("diff", path, "--policy", "prefix,fixed"), ("explain", path, "--round", "0")):
            out = run_cli(*args)
            assert out.code == 2 and says in out.stderr, (name, out.stderr)
            assert len(out.stderr.strip().splitlines()) == 1


def test_config_fields_left_out_take_the_models_defaults(tmp_path):
    """A scenario without ``max_new_tokens`` or ``cache_kind`` runs as ``Config`` would
    be built without them."""
    import dataclasses

    from kvforensics.model import Config
    from kvforensics.scenario import load_scenario

    text = TEXT.replace("max_new_tokens = 1\n", "").replace('cache_kind = "hybrid"\n', "")
    path = tmp_path / "s.toml"
    path.write_text(text)
    cfg = load_scenario(path).cfg
    defaults = {f.name: f.default for f in dataclasses.fields(Config)}
    assert (cfg.max_new_tokens, cfg.cache_kind) == (
        defaults["max_new_tokens"],
        defaults["cache_kind"],
    )


def test_one_ledger_without_policies_cannot_be_diffed_by_policy(tmp_path):
    """A ledger file with no policy column holds one ledger: naming two policies of it is a
    one-line error (it was a KeyError, exit 70)."""
    import polars as pl

    df = pl.read_csv(_ledger(tmp_path), infer_schema_length=None)
    path = tmp_path / "one.csv"
    df.filter(pl.col("policy") == "prefix").drop("policy").write_csv(path)
    out = run_cli("diff", path, "--policy", "prefix,fixed")
    assert out.code == 2 and "without a policy column" in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_an_allocation_without_its_piece_is_refused(tmp_path):
    """A damaged ledger whose allocation row lost its start and end is a one-line error
    (explain --rid computed end - start with them: a TypeError, exit 70, fuzz seed
    83001577)."""
    import polars as pl

    df = pl.read_csv(_ledger(tmp_path), infer_schema_length=None)
    first = df.with_row_index("i").filter(pl.col("call") == "allocate")["i"][0]
    broken = df.with_columns(
        [pl.when(pl.int_range(pl.len()) == first).then(None).otherwise(pl.col(c)).alias(c)
         for c in ("start", "end")]
    )  # fmt: skip
    path = tmp_path / "broken.csv"
    broken.write_csv(path)
    for args in (("explain", path, "--rid", "as-1keim4u1e8"), ("diff", path, "--policy", "prefix,fixed")):
        out = run_cli(*args)
        assert out.code == 2 and "allocation without its piece" in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1


def test_a_row_of_no_known_call_is_refused(tmp_path):
    """A damaged ``call`` (fuzz seed 83001577: a number) was taken for an allocation."""
    import polars as pl

    df = pl.read_csv(_ledger(tmp_path), infer_schema_length=None)
    path = tmp_path / "odd.csv"
    df.with_columns(
        pl.when(pl.int_range(pl.len()) == 1).then(pl.lit("18446744073709551616"))
        .otherwise(pl.col("call")).alias("call")
    ).write_csv(path)  # fmt: skip
    out = run_cli("explain", path, "--rid", "as-1keim4u1e8")
    assert out.code == 2 and "is none of add_one_req" in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
