"""The Rebuilder hands each round on as soon as the events that follow it show it is
complete, with its index given once, and gives the same rounds as the collected rebuild."""

from kvforensics.logs import read_events
from kvforensics.rounds import Rebuilder, read_config, rebuild_rounds
from kvforensics.rounds.rebuild import deciding_rows
from tests.conftest import FIXTURES

PP0 = FIXTURES / "logs" / "incident" / "pp0.log"


def _line(where: str) -> int:
    return int(where.rsplit(":", 1)[1])


def test_rounds_leave_with_one_round_of_lookahead():
    events, _ = read_events([PP0])
    cfg, _conf = read_config(events, {})
    rb = Rebuilder(cfg)
    seen: list[tuple[int, int]] = []  # (round index, line of the event that completed it)
    for ev in deciding_rows(events, "PP0"):
        seen += [(r.index, _line(ev.where)) for r in rb.feed(ev)]
    seen += [(r.index, 10**9) for r in rb.finish()]
    rounds = rebuild_rounds(events, cfg, {}).rounds
    assert [i for i, _ in seen] == list(range(len(rounds)))
    first_line = {
        r.index: _line(r.decisions[0].where) if r.decisions else None for r in rounds
    }
    logged = [r.index for r in rounds if r.decisions]
    # A logged round is out before the adder lines of the logged round after the next.
    for a, c in zip(logged, logged[2:], strict=False):
        completed_at = dict(seen)[a]
        assert completed_at <= first_line[c], (a, completed_at, c, first_line[c])


def test_streamed_rounds_equal_the_collected_rebuild():
    events, _ = read_events([PP0])
    cfg, conf = read_config(events, {})
    rb = Rebuilder(cfg)
    streamed = [r.as_dict() for r in rb.stream(deciding_rows(events, "PP0"))]
    collected = rebuild_rounds(events, cfg, conf)
    assert streamed == [r.as_dict() for r in collected.rounds]
    assert rb.oom == collected.oom and rb.oom.round == len(streamed) - 1
