"""``rounds -o`` streams what ``rounds --format json`` prints; ``--since``/``--until``
narrow the rounds."""

import functools
import json

from tests.conftest import FIXTURES
from tests.replay.test_replay_cli import cli

INC = FIXTURES / "logs" / "incident"


def test_rounds_output_streams_what_json_prints(tmp_path):
    out = tmp_path / "r.ndjson"
    r = cli("rounds", INC / "pp0.log", "-o", out)
    assert r.returncode == 0, r.stderr
    printed = json.loads(cli("rounds", INC / "pp0.log", "--format", "json").stdout)
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert written == printed["rounds"]
    assert "7751 rounds written" in r.stdout


def test_since_until_narrow_rounds_and_parquet(tmp_path):
    import polars as pl

    out = tmp_path / "r.parquet"
    r = cli("rounds", INC / "pp0.log", "-o", out, "--since", "7747", "--until", "7749")
    assert r.returncode == 0, r.stderr
    assert pl.read_parquet(out)["round"].unique().sort().to_list() == [7747, 7748, 7749]
    by_time = cli("rounds", INC / "pp0.log", "--since", "2026-11-02 15:16:28", "--format", "json")
    assert [x["round"] for x in json.loads(by_time.stdout)["rounds"]] == [7748, 7749, 7750]


def test_bad_since_is_a_one_line_error(tmp_path):
    r = cli("rounds", INC / "pp0.log", "--since", "yesterday")
    assert r.returncode == 2
    assert "--since 'yesterday'" in r.stderr and "Traceback" not in r.stderr


# -- replay streams --------------------------------------------------------------------

import pytest  # noqa: E402

from kvforensics.replay import ReplayOptions, replay_logs  # noqa: E402
from kvforensics.replay.stock import NoAdderLines  # noqa: E402
from kvforensics.replay.whole_log import whole_log  # noqa: E402

LOGS = FIXTURES / "logs"
INPUTS = {
    "incident": [INC / "pp0.log", INC / "pp1.log.gz", INC / "pp3.log"],
    "incident-pp0": [INC / "pp0.log"],
    "clean": [LOGS / "clean" / "pp0.log"],
    "contradiction": [LOGS / "contradiction" / "pp0.log"],
    "samples": [LOGS / "samples" / f"incident-pp{r}.log" for r in (0, 1, 3)],
    "stock": [LOGS / "stock" / "2025-4602-decode-oom-page64.log"],
}
POLICIES = ["fixed", "upstream", "drain", "park"]


def _json(paths, **kw) -> str:
    try:
        rr = replay_logs(paths, ReplayOptions(POLICIES, whole_log=True, **kw))
    except NoAdderLines as no:  # a release's log: what it tells
        assert no.release
        return json.dumps(no.stock().as_dict(), sort_keys=False, default=str)
    d = rr.as_dict()
    d["whole_log"] = whole_log(rr).as_dict()
    return json.dumps(d, sort_keys=False, default=str)


@functools.cache
def _whole(name: str) -> str:
    """The whole (unstreamed) replay's JSON, once per input for both windows."""
    return _json(INPUTS[name])


@pytest.mark.parametrize("name", sorted(INPUTS))
@pytest.mark.parametrize("window", [None, 50])
def test_streamed_replay_says_what_the_whole_replay_says(name, window):
    whole = _whole(name)
    kw = {"stream": True} | ({"window": window} if window else {})
    assert _json(INPUTS[name], **kw) == whole


def test_streamed_replay_keeps_few_rounds_and_counts_all():
    rr = replay_logs(INPUTS["incident"], ReplayOptions(["fixed"], stream=True, window=50))
    assert rr.rounds_seen == 7751 and rr.logged_seen == rr.fidelity.rounds_checked == 5162
    kept = [r.index for r in rr.rebuild.rounds]
    assert len(kept) < 100 and kept[-1] == 7750 and rr.start_round in kept


@pytest.mark.parametrize("name", ["incident", "clean"])
def test_the_rounds_spooled_out_of_memory_say_what_the_whole_replay_says(name, monkeypatch):
    """The per-round columns a streamed replay gathers (cross-check keys, margins, transfer
    traffic) keep fewer than a chunk of rows in memory however long the log; read back
    from their files they give the same replay."""
    from kvforensics.replay.passes import RoundPass
    from kvforensics.rounds import compact

    whole = _whole(name)
    monkeypatch.setattr(compact, "CHUNK", 8)
    made, init = [], RoundPass.__post_init__
    monkeypatch.setattr(RoundPass, "__post_init__", lambda ps: (init(ps), made.append(ps)))
    assert _json(INPUTS[name], stream=True, window=50) == whole
    (ps,) = made
    spools = [ps.keys._rows, ps.wholelog.margins.rows, ps.traffic.frees, ps.traffic.finishes]
    assert len(ps.keys) > 20 * 8 and len(ps.wholelog.margins.rows) > 20 * 8
    assert all(sp.held < 8 for sp in spools)


def test_a_streamed_rebuild_forgets_each_request_once_its_last_piece_ran():
    """``rounds -o`` holds the prompt lengths of the unfinished requests only, so memory
    stays flat in the log's length; the rounds are the ones a rebuild that keeps every
    length gives."""
    from kvforensics.rounds import from_logs
    from kvforensics.rounds.stream import LogStream, forgetting

    kept = from_logs([INC / "pp0.log"]).rebuild
    ls = LogStream([INC / "pp0.log"])
    streamed = [r.as_dict() for r in forgetting(ls, ls)]
    assert streamed == [r.as_dict() for r in kept.rounds]
    done = {p.rid for r in kept.rounds if r.oom is None for p in r.pieces
            if p.end == kept.seq_lens.get(p.rid)}  # fmt: skip
    assert done and not done & set(ls.rebuilder.seq_lens)
    assert set(ls.rebuilder.seq_lens) == set(kept.seq_lens) - done
    # the out-of-memory's victim never finished: its length is still there
    assert kept.oom.rid in ls.rebuilder.seq_lens
