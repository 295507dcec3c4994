"""Sizes are checked once, where the configuration is built, with where they came from."""

from hypothesis import given, settings
from hypothesis import strategies as st

from kvforensics.model import Config
from kvforensics.model.config import MAX_TOKENS, size_problems
from tests.reliability._logs import write_log
from tests.reliability._run import run_cli

sizes = st.one_of(st.integers(-3, 1024), st.sampled_from([2**40, 2**40 + 1, 2**64]))


@settings(max_examples=300, derandomize=True, deadline=None)
@given(page=sizes, chunk=sizes, prefill=sizes, pool=sizes, align=sizes)
def test_config_builds_exactly_when_no_problem(page, chunk, prefill, pool, align):
    fields = dict(
        page_size=page,
        chunked_prefill_size=chunk,
        max_prefill_tokens=prefill,
        pool_size=pool,
        align_size=align,
    )
    problems = size_problems(fields)
    try:
        cfg = Config(**fields)
    except ValueError as exc:
        assert problems, exc
        name, why = problems[0]
        assert str(exc) == f"{name} {fields[name]} {why}"
    else:
        assert not problems
        assert 0 < cfg.page_size <= cfg.chunked_prefill_size <= MAX_TOKENS
        assert cfg.align_size % cfg.page_size == 0


def _one_line_error(out, *words):
    assert out.code == 2, (out.code, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


def test_log_size_names_its_line(tmp_path):
    for bad in ("0", "-1"):
        log = write_log(tmp_path, {"page_size=64": f"page_size={bad}"})
        for cmd in ("rounds", "replay"):
            _one_line_error(
                run_cli(cmd, log), f"page_size {bad}", "pp0.log:1", "positive", "--page-size"
            )


def test_flags_are_checked(tmp_path):
    log = write_log(tmp_path)
    for flags, words in [
        (("--align", "100"), ("--align 100", "multiple of page_size 64")),
        (("--page-size", "0"), ("--page-size 0", "positive")),
        (("--chunk-size", "0"), ("--chunk-size 0", "positive")),
        (("--pool-size", "-1"), ("--pool-size -1", "positive")),
        (("--pool-size", str(2**70)), ("beyond any node",)),
        # the log's adder lines show a chunk budget of 16384: a chunk of 64 is refuted,
        # and would make the rebuild invent hundreds of rounds per request
        (("--chunk-size", "64"), ("--chunk-size 64", "rem_chunk_tokens=16384", "pp0.log:4")),
        (("--chunk-size", "1", "--page-size", "1"), ("--chunk-size 1", "rem_chunk_tokens")),
        # free + evictable slots (the adder's baseline) and device prefixes fit in the pool
        (("--pool-size", "64"), ("--pool-size 64", "baseline=121408", "pp0.log:4")),
    ]:
        _one_line_error(run_cli("rounds", log, *flags), *words)


def test_unreadable_pool_line_is_named(tmp_path):
    log = write_log(tmp_path, {"max_total_num_tokens=262144": f"max_total_num_tokens={2**64}"})
    _one_line_error(run_cli("rounds", log), "pool_size", "pp0.log:2", "64 bits", "--pool-size")
    # the flag gives what the line could not
    assert run_cli("rounds", log, "--pool-size", "262144").code == 0


def test_out_of_memory_numbers_above_the_pool_refute_it(tmp_path):
    # an out-of-memory line's evictable slots are part of the pool: 2**40 of them is not
    # a number the replay can hold back as unevictable
    log = write_log(tmp_path, {"full_evictable_size_=0": f"full_evictable_size_={2**40}"})
    for cmd in ("rounds", "replay", "report"):
        args = ("-o", tmp_path / "out") if cmd == "report" else ()
        _one_line_error(
            run_cli(cmd, log, *args), f"oom_evictable_size={2**40}", "pp0.log:", "--pool-size"
        )
