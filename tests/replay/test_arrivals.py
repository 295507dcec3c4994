"""Requests that arrive after the round a forward run starts from are facts of the world:
under ``prefix`` the replay of the rendered logs runs the rounds as they ran, arrivals
included, and the list kept for them lives only while its request is being chunked."""

from __future__ import annotations

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kvforensics.model import Config, PrefillNode, Request, Timing, get_policy
from kvforensics.replay import ReplayOptions, replay_logs
from kvforensics.replay.arrivals import Arrivals
from kvforensics.rounds.records import Decision, Piece, Round
from kvforensics.synth import capture_run
from kvforensics.synth.incidents import Incident, _held_pool


@st.composite
def nodes(draw):
    """A node whose transfers outlast the run: a long request in the queue, chunked with
    chunk budget left after each aligned piece, and requests with little to compute and
    much to load back arriving between rounds, at any time within a round's second."""
    page = draw(st.sampled_from([16, 64]))
    align = page * draw(st.sampled_from([4, 8]))
    left = page * draw(st.integers(1, align // page - 1))
    chunk = align * draw(st.integers(4, 16)) + left
    cfg = Config(page_size=page, chunked_prefill_size=chunk, max_prefill_tokens=4 * chunk,
                 pool_size=64 * chunk, align_size=align)  # fmt: skip
    seq = draw(st.integers(2 * chunk, 5 * chunk))
    free = seq + 1 + page + page * draw(st.integers(0, 2 * chunk // page))
    waiting = [("victim", seq, 0)]
    if draw(st.booleans()):
        waiting.insert(0, ("first", draw(st.integers(1, chunk // 2)), 0))
    late = []
    for i in range(draw(st.integers(1, 5))):
        host = draw(st.integers(chunk // 2, 2 * chunk))
        late.append((f"a{i}", host + draw(st.integers(1, left)), host, draw(st.floats(0.01, 5.0))))
    return cfg, free, waiting, late


def _incident(cfg, free, waiting, late) -> Incident:
    timing = Timing(round_overhead_s=1.0, transfer_latency_s=1e6)

    def build(policy: str) -> PrefillNode:
        pool, flight = _held_pool(cfg, free, 2, 1e6)
        return PrefillNode(
            cfg, get_policy(policy), pool, inflight=flight, timing=timing,
            waiting=[Request(r, s, host_hit=h) for r, s, h in waiting],
            arrivals=[Request(r, s, host_hit=h, arrival=t) for r, s, h, t in late],
        )  # fmt: skip

    return Incident("arrivals", (), cfg, build, "", ())


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(nodes())
# the crash comes a round after the last adder lines, that round's piece inside one block
# (no write): the rebuild once pinned it on the logged round, whose batch had fitted
@example((Config(page_size=16, chunked_prefill_size=272, max_prefill_tokens=1088,
                 pool_size=17408, align_size=64),
          993, [("victim", 864, 0)], [("a0", 137, 136, 1.0), ("a1", 137, 136, 3.0)]))
def test_prefix_runs_the_rounds_as_they_ran_with_the_arrivals(tmp_path_factory, case):
    inc = _incident(*case)
    cap = capture_run(inc.build("prefix"), max_rounds=40)
    if cap.oom is None:
        return  # no crash: the forward run starts at the last round, nothing arrives after
    inc.capture = cap
    rr = replay_logs(inc.write(tmp_path_factory.mktemp("arrivals")), ReplayOptions())
    prefix = rr.results["prefix"]
    assert rr.reproduced is True, (prefix.oom, cap.oom)
    ran = [(rc.round, rc.pieces) for rc in cap.rounds if rc.round >= rr.start_round]
    assert [(r.round, r.pieces) for r in prefix.rounds] == ran


def _round(index, rids, truncated=(), pieces=()):
    ds = [Decision(r, 100, 0, 0, 0, 0, 0, 0, "pp0.log:1",
                   decision="truncated" if r in truncated else "full") for r in rids]  # fmt: skip
    return Round(index, None, ds, [Piece(r, 0, 50, "resumed", "observed") for r in pieces])


def test_the_arrivals_of_a_request_no_longer_chunked_are_forgotten():
    arr = Arrivals()
    arr.open("x", _round(0, ["a", "x"], truncated=["x"]))
    arr.add(_round(1, ["a", "b"], pieces=["x"]))
    assert [s.rid for s in arr.since("x")] == ["b"]  # "a" was in the start round's queue
    # "y" is truncated in a round without "x": the adder chunks one request at a time
    arr.open("y", _round(2, ["c", "y"], truncated=["y"]))
    arr.add(_round(3, ["d"], pieces=["y"]))
    assert arr.since("x") == [] and [s.rid for s in arr.since("y")] == ["d"]
    arr.close("y")
    assert arr.since("y") == []


def test_a_streamed_replay_keeps_the_arrivals(tmp_path):
    from kvforensics.synth.incidents import late_arrival

    paths = late_arrival().write(tmp_path)
    whole = replay_logs(paths, ReplayOptions(["fixed", "park"]))
    streamed = replay_logs(paths, ReplayOptions(["fixed", "park"], stream=True, window=50))
    assert streamed.as_dict() == whole.as_dict()
    assert streamed.reproduced is True and "as-c" in streamed.results["park"].requests
