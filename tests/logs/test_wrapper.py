"""A file's wrapper (the text in front of SGLang's own) is learned from the file and read
behind: every wrapped form of a real excerpt gives the events of the excerpt itself."""

from __future__ import annotations

from datetime import datetime, time

import polars as pl
import pytest

from kvforensics.logs import load_catalogue, read_events
from kvforensics.logs.wrapper import Wrapper, learn
from tests.stock.corpus import STOCK

CAT = load_catalogue()
FORMS = {f.name: f for f in CAT.wrappers}


def _samples():
    for f in CAT.wrappers:
        for i, s in enumerate(f.samples):
            yield pytest.param(f, s, id=f"{f.name}:{i}")


@pytest.mark.parametrize(("form", "sample"), list(_samples()))
def test_wrapper_sample(form, sample):
    rest, times = Wrapper((form,)).strip(pl.Series([sample["line"]]))
    assert rest.to_list() == [sample["rest"]]
    if "time" in sample:
        want = datetime.strptime(sample["time"], "%Y-%m-%d %H:%M:%S.%f")
        assert times["_wtime"].to_list() == [want]
    if "clock" in sample:
        assert times["_wclock"].to_list() == [time.fromisoformat(sample["clock"])]


def test_every_wrapper_form_has_samples():
    assert all(f.samples for f in CAT.wrappers)


# (wrapper forms, outermost first; how one line is wrapped)
WRAPS = {
    "compose": (("compose",), lambda i, ln: f"sglang-1  | {ln}"),
    "kubectl": (("kubectl_prefix",), lambda i, ln: f"[pod/sglang-0/sglang] {ln}"),
    "container time, Python logging": (
        ("rfc3339", "python_logging"),
        lambda i, ln: f"2025-03-07T21:49:{i % 60:02d}.097121828Z "
        f"2025-03-07 21:49:{i % 60:02d},096 - sglang - INFO - {ln}",
    ),
    "journald": (
        ("journald",),
        lambda i, ln: f"Mar  7 21:49:{i % 60:02d} gpu-7 python3[4242]: {ln}",
    ),
    "slurm": (("slurm",), lambda i, ln: f"{i % 2}: {ln}"),
    "diff": (("quote", "indent"), lambda i, ln: f"+    {ln}"),
    "indent": (("indent",), lambda i, ln: f"    {ln}"),
}
EXCERPTS = [
    "2025-4184-retractions.log",
    "2026-27215-gemma-swa-joined.log",
    "2025-lmcache869-valueerror.log",
    "2026-30743-glm-exhaustion.log",
    "2025-14972-decode-batches.log",
]
SAME = [
    *("kind", "rank", "time", "oom_tokens", "oom_available", "oom_available_size"),
    *("oom_evictable_size", "exception", "retracted_reqs", "new_token", "num_token"),
]


@pytest.mark.parametrize("excerpt", EXCERPTS)
@pytest.mark.parametrize("wrap", list(WRAPS), ids=str)
def test_a_wrapped_excerpt_reads_as_the_excerpt(tmp_path, excerpt, wrap):
    forms, fn = WRAPS[wrap]
    src = STOCK / excerpt
    lines = src.read_text(encoding="utf-8").splitlines()
    wrapped = tmp_path / excerpt
    wrapped.write_text("\n".join(fn(i, ln) for i, ln in enumerate(lines)) + "\n")
    want, _ = read_events([src])
    got, summary = read_events([wrapped])
    cols = [c for c in SAME if c in want.columns]
    assert got.select(cols).drop("time").to_dicts() == want.select(cols).drop("time").to_dicts()
    # SGLang's own time where it printed one, else the wrapper's (when it has one)
    timed = wrap == "container time, Python logging"
    for g, w in zip(got["time"].to_list(), want["time"].to_list(), strict=True):
        assert g == w if w is not None or not timed else g is not None
    (fs,) = summary.files
    says = ", then ".join(FORMS[n].says for n in forms)
    assert fs.wrapper == f"lines wrapped by {says}"
    assert f"{wrapped}: {fs.wrapper}; read behind it" in summary.notes()


def test_a_wrapper_time_stands_in_for_a_missing_one(tmp_path):
    log = tmp_path / "w.log"
    log.write_text(
        "2024-11-14T22:16:37.097121828Z Prefill out of memory. Try to lower your batch size.\n"
        "2024-11-14T22:16:37.097121828Z Try to allocate 8192 tokens.\n"
        "2024-11-14T22:16:37.097121828Z Available tokens: 5120 (available_size=1024 + evictable_size=4096)\n"
    )
    df, _ = read_events([log])
    (oom,) = df.to_dicts()
    assert (oom["kind"], oom["oom_tokens"], oom["oom_evictable_size"]) == ("oom", 8192, 4096)
    assert oom["time"] == datetime(2024, 11, 14, 22, 16, 37, 97000) and oom["time_has_ms"]


def test_lines_that_start_with_their_message_learn_nothing():
    text = (STOCK / "2025-4184-retractions.log").read_text(encoding="utf-8").splitlines()
    assert learn(text, CAT) is None
    assert learn(["shopping list", "milk"], CAT) is None


def test_text_no_form_explains_is_read_from_sglang_prefix_on(tmp_path):
    log = tmp_path / "own.log"
    log.write_text(
        "worker-7 ~> [2025-03-07 21:49:33 TP13] Decode out of memory happened. "
        "#retracted_reqs: 1, #new_token_ratio: 0.1474 -> 0.1845\n"
        "worker-7 ~> [2025-03-07 21:49:45 TP9] Decode out of memory happened. "
        "#retracted_reqs: 2, #new_token_ratio: 0.0980 -> 0.1919\n"
    )
    df, summary = read_events([log])
    assert df["rank"].to_list() == ["TP13", "TP9"] and df["retracted_reqs"].to_list() == [1, 2]
    assert summary.files[0].wrapper == "lines wrapped by text of its own"


def test_a_user_prefix_turns_learning_off():
    cat = load_catalogue([STOCK / "olmocr-prefix.toml"])
    lines = (STOCK / "2025-olmocr105-python-logging.log").read_text().splitlines()
    assert not cat.learns_wrappers and learn(lines, cat) is None


def test_chunks_of_a_wrapped_log_are_cut_between_its_messages(tmp_path):
    """Small chunks cut only where a wrapped line starts a message: the traceback of a
    crash stays with its report, whatever the chunk size."""
    src = STOCK / "2025-olmocr105-python-logging.log"
    lines = src.read_text(encoding="utf-8").splitlines()
    log = tmp_path / "twice.log"
    log.write_text("\n".join(lines + lines) + "\n")
    whole, _ = read_events([log])
    small, summary = read_events([log], chunk_bytes=512)
    assert small.select("line", "kind", "attached").to_dicts() == whole.select(
        "line", "kind", "attached"
    ).to_dicts()
    assert whole.height == 2 and summary.unmatched == 0
