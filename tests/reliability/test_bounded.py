"""Damaged logs end in bounded time: every walk over rounds or pieces is bounded by what the
evidence allows (the request's length, the log's time span), and a walk past it is a
contradiction, not more work. Each case runs in a child with a deadline, so a walk that
never ends fails the test instead of hanging it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import FIXTURES, ROOT

INCIDENT_PP0 = FIXTURES / "logs" / "incident" / "pp0.log"
RID = re.compile(rb"as-[a-z0-9]{10}")


def _cli(*args, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kvforensics", *map(str, args)],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def one_rid_log(tmp: Path, lines: int, rid: bytes = b"as-sameridxxx") -> Path:
    """The incident's PP0 log cut at ``lines``, every rid the same one (a client reusing its
    request ids), every other line ending in CRLF (files joined across systems)."""
    with INCIDENT_PP0.open("rb") as f:
        head = [next(f) for _ in range(lines)]
    out = [
        RID.sub(rid, line.rstrip(b"\r\n")) + (b"\r\n" if i % 2 else b"\n")
        for i, line in enumerate(head)
    ]
    path = tmp / "one-rid.log"
    path.write_bytes(b"".join(out))
    return path


def test_write_past_the_chunked_requests_end_is_a_contradiction(tmp_path):
    """Under one rid, an AttentionStore write of a later request lands past the chunked
    one's seq_len: the walk to it used to run on for ever at the request's end."""
    log = one_rid_log(tmp_path, 1100)
    out = _cli("rounds", log, "--format", "json")
    assert out.returncode == 3, out.stderr  # the evidence contradicts itself
    said = [c["detail"] for c in json.loads(out.stdout)["contradictions"]]
    assert any("past its seq_len" in d and "as-sameridxxx" in d for d in said), said


def test_one_rid_for_the_whole_log_replays(tmp_path):
    """The same damage on a longer cut, through replay: a result (exit 3: the evidence
    contradicts itself), with the reused rid's rounds each finished once."""
    log = one_rid_log(tmp_path, 20000)
    out = _cli("replay", log)
    assert out.returncode == 3, out.stderr
    assert "contradiction(s) in the evidence" in out.stdout
    assert "past its seq_len" in out.stdout


def test_a_reused_rid_finishes_once_per_round():
    """Two pieces of one rid ending at its length in one round (a reused request id): the
    request is finished once, so its length is forgotten once."""
    from kvforensics.rounds.records import Piece, Round
    from kvforensics.rounds.stream import finished

    rnd = Round(0, None)
    rnd.pieces += [Piece("r", 0, 64, "new", "observed"), Piece("r", 0, 64, "new", "observed")]
    assert finished(rnd, {"r": 64}) == ["r"]


HUGE = """\
[2026-11-02 15:16:26 PP0] PrefillAdder.add_one_req: rid=as-huge, seq_len=549755813888, \
prefix_len=0, host_hit_len=0, rem_chunk_tokens=16384, local rem total: 121408, current \
rem_total_tokens: 121408, cur_rem_tokens: 121408
[2026-11-02 15:16:26 PP0] PrefillAdder.add_one_req result: rid=as-huge, decision=truncated, \
extend=[0, 16384), result=OTHER
[2026-11-02 15:16:27 PP0] PrefillAdder.add_one_req: rid=as-small, seq_len=100, prefix_len=0, \
host_hit_len=0, rem_chunk_tokens=16384, local rem total: 105024, current rem_total_tokens: \
105024, cur_rem_tokens: 105024
[2026-11-02 15:16:27 PP0] PrefillAdder.add_one_req result: rid=as-small, decision=full, \
extend=[0, 100), result=OTHER
"""


def _huge_log(tmp: Path, pool: int) -> Path:
    """A request of 2**39 tokens truncated, and a second later a round with the whole chunk
    budget left: it finished in silent rounds, 2**25 of them by the model's sizing."""
    head = (FIXTURES / "logs" / "samples" / "incident-pp0.log").read_text().splitlines()[:3]
    head[1] = head[1].replace("max_total_num_tokens=262144", f"max_total_num_tokens={pool}")
    path = tmp / "huge.log"
    path.write_text("\n".join(head) + "\n" + HUGE)
    return path


def _contradictions(log: Path) -> tuple[int, list[dict]]:
    out = _cli("rounds", log, "--format", "json")
    assert out.returncode == 3, out.stderr
    got = json.loads(out.stdout)
    return len(got["rounds"]), got["contradictions"]


def test_silent_rounds_stop_at_the_pool(tmp_path):
    """No chunked request holds more than the pool: the walk stops there, said once."""
    rounds, said = _contradictions(_huge_log(tmp_path, 262144))
    walks = [c for c in said if c["what"] == "silent rounds"]
    assert [c["detail"] for c in walks] == [
        "as-huge (seq_len 549755813888) at 252416: its next silent piece would end at "
        "268800, past the pool of 262144 that holds all of it"
    ]
    assert rounds == walks[0]["round"] + 1 < 40


def test_silent_rounds_stop_at_the_time_span(tmp_path):
    """With a pool that holds it, one second (and the timestamps' one) allows at most
    2,000 rounds: the walk stops there instead of inventing 2**25 of them."""
    rounds, said = _contradictions(_huge_log(tmp_path, 2**40))
    (walk,) = [c for c in said if c["what"] == "silent rounds"]
    assert "than the log's time span allows (2000 since 2026-11-02 15:16:26" in walk["detail"]
    assert rounds == 2002  # the two logged rounds and the 2,000 silent ones between
