"""Telling the SGLang release from a log's lines (``logs/release.py``) and the profile a
replay takes from it (``replay/profile_choice.py``). The ``Prefill batch`` lines below are
each release's own form on a PD prefill node, written from its ``report_prefill_stats``
(docs/sglang-releases.md, "Telling the release from a log")."""

from __future__ import annotations

import pytest

from kvforensics.logs.release import detect_release
from kvforensics.model.profiles import profile_for_release
from kvforensics.replay.profile_choice import choose_profile

HEAD = "Prefill batch, #new-seq: 1, #new-token: 512, #cached-token: 0, token usage: 0.01, "
HEAD += "#running-req: 0, #queue-req: 3, "
PD_TAIL = {
    "0.5.9": "#prealloc-req: 0, #inflight-req: 1, input throughput (token/s): 9.50, "
    "cuda graph: False",
    "0.5.10": "#prealloc-req: 0, #inflight-req: 1, cuda graph: False, "
    "input throughput (token/s): 9.50",
    "0.5.11": "#pending-token: 0, #prealloc-req: 0, #inflight-req: 1, cuda graph: False, "
    "input throughput (token/s): 9.50",
    "0.5.12": "#pending-token: 0, #bootstrap-req: 0, #inflight-req: 1, cuda graph: False, "
    "input throughput (token/s): 9.50",
    "0.5.16": "#pending-token: 0, #bootstrap-req: 0, #inflight-req: 1, #optimistic-req: 0, "
    "cuda graph: False, input throughput (token/s): 9.50",
    "0.5.22": "#pending-token: 0, #replay-token: 64, #bootstrap-req: 0, #inflight-req: 1, "
    "#optimistic-req: 0, cuda graph: False, input throughput (token/s): 9.50",
}
#: release form -> (what replay says, the profile it takes or None for the default)
TOLD = {
    "0.5.9": ("0.5.9 or earlier", None),
    "0.5.10": ("0.5.10", "sglang-0.5.10"),
    "0.5.11": ("0.5.11", "sglang-0.5.11"),
    "0.5.12": ("0.5.12 to 0.5.15", None),
    "0.5.16": ("0.5.16 or later", None),
    "0.5.22": ("0.5.21 or later", None),
}


def _log(tmp_path, *lines: str, name: str = "tp0.log"):
    p = tmp_path / name
    p.write_text("".join(f"[2026-12-01 11:00:0{i % 10} TP0] {x}\n" for i, x in enumerate(lines)))
    return p


@pytest.mark.parametrize("form", sorted(PD_TAIL))
def test_each_release_form_is_told(tmp_path, form):
    ev, notes = detect_release([_log(tmp_path, HEAD + PD_TAIL[form])])
    span, name = TOLD[form]
    assert (ev.how, ev.span(), notes) == ("lines", span, [])
    got = choose_profile([tmp_path / "tp0.log"])
    if name is None:
        assert got.how == "default" and got.profile.name == "fork" and "give --profile" in got.why
    else:
        assert (got.profile.name, got.how) == (name, "detected")
        assert "tp0.log:1" in got.why


@pytest.mark.parametrize("form", sorted(PD_TAIL))
def test_the_release_itself_is_inside_what_is_told(tmp_path, form):
    ev, _ = detect_release([_log(tmp_path, HEAD + PD_TAIL[form])])
    r = tuple(int(x) for x in form.split("."))
    assert (ev.lo is None or ev.lo <= r) and (ev.hi is None or r <= ev.hi)


def test_lines_narrow_each_other_and_disagreeing_lines_tell_nothing(tmp_path):
    # a non-PD line of 0.5.11 on (#pending-token) and a PD line of 0.5.12-0.5.15
    plain = HEAD + "#pending-token: 0, cuda graph: False, input throughput (token/s): 1.0"
    ev, _ = detect_release([_log(tmp_path, plain, HEAD + PD_TAIL["0.5.12"])])
    assert ev.span() == "0.5.12 to 0.5.15" and ev.where.endswith(":2")
    ev, notes = detect_release([_log(tmp_path, HEAD + PD_TAIL["0.5.9"], HEAD + PD_TAIL["0.5.16"])])
    assert ev is None and "disagree" in notes[0]
    assert choose_profile([tmp_path / "tp0.log"]).why == notes[0]


def test_a_cut_last_line_and_a_cut_form_tell_nothing(tmp_path):
    p = tmp_path / "cut.log"
    p.write_text("[2026-12-01 11:00:00 TP0] " + HEAD + PD_TAIL["0.5.10"][:40])
    assert detect_release([p]) == (None, [])
    assert detect_release([_log(tmp_path, HEAD + PD_TAIL["0.5.10"][:40])]) == (None, [])


@pytest.mark.parametrize(
    "line",
    ["sglang==0.5.16", "sglang: 0.5.16", "image lmsysorg/sglang:v0.5.16-cu129",
     "/usr/lib/python3/site-packages/sglang-0.5.16.dist-info/METADATA"],
)  # fmt: skip
def test_a_version_string_names_the_release(tmp_path, line):
    p = _log(tmp_path, line, HEAD + PD_TAIL["0.5.16"])
    ev, _ = detect_release([p])
    assert (ev.how, ev.span()) == ("version", "0.5.16")
    got = choose_profile([p])
    assert (got.profile.name, got.how) == ("sglang-0.5.13", "detected")
    assert got.as_dict()["release"] == "0.5.16" and got.as_dict()["where"].endswith(":1")


def test_the_fork_lines_win_and_given_wins_over_all(tmp_path):
    fork = "PrefillAdder.add_one_req: rid=a, seq_len=10, prefix_len=0, host_hit_len=0"
    p = _log(tmp_path, "sglang==0.5.23", HEAD + PD_TAIL["0.5.9"], fork)
    got = choose_profile([p])
    assert (got.profile.name, got.how, got.as_dict()["where"]) == ("fork", "detected", f"{p}:3")
    got = choose_profile([p], "sglang-0.5.23")
    assert (got.profile.name, got.how) == ("sglang-0.5.23", "given")


def test_sglang_jax_is_no_sglang_release(tmp_path):
    p = _log(tmp_path, 'File "/home/u/sglang-jax/python/sgl_jax/srt/managers/x.py"',
             HEAD + PD_TAIL["0.5.11"])  # fmt: skip
    got = choose_profile([p])
    assert (got.profile.name, got.how, got.as_dict()["release"]) == ("fork", "default", None)


@pytest.mark.parametrize(
    "version", ["0.5.9", "0.5.10", "0.5.11", "0.5.12", "0.5.13", "0.5.16", "0.5.20", "0.5.22",
                "0.5.23"],
)  # fmt: skip
def test_a_version_string_takes_that_releases_profile(tmp_path, version):
    p = _log(tmp_path, f"sglang: {version}")
    got = choose_profile([p])
    assert (got.profile, got.how) == (profile_for_release(version), "detected")


def test_an_unknown_profile_is_a_one_line_error(tmp_path):
    from kvforensics.errors import InputError

    with pytest.raises(InputError, match="unknown profile 'nope'; choose from fork"):
        choose_profile([_log(tmp_path, HEAD)], "nope")
