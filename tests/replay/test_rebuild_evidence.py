"""Where the model's walk of silent rounds from an assumed baseline meets the evidence:
the lock a check's line was printed after, the chunk budget a resumed last piece spent,
the tree dump after an out-of-memory message. Numbers from worlds of the independent
simulator (tests/ground) whose rounds the rebuild once misread."""

from datetime import datetime

from kvforensics.model import Config
from kvforensics.rounds.batch_index import BatchSizes
from kvforensics.rounds.compact import pack_time
from kvforensics.rounds.provenance import INFERRED, OBSERVED, Prov
from kvforensics.rounds.rebuild import Rebuilder
from kvforensics.rounds.reconcile import tree_start
from kvforensics.rounds.records import Decision, LoggedOom, Piece, Round
from kvforensics.rounds.walk import Chunked, first_lock, walk_below

# page 48, align 384, chunk 12288 (world 7410)
CFG48 = Config(page_size=48, chunked_prefill_size=12288, max_prefill_tokens=16384,
               pool_size=101280, align_size=384)  # fmt: skip
# page 64, align 256, chunk 16384 (world 5498)
CFG64 = Config(page_size=64, chunked_prefill_size=16384, max_prefill_tokens=16384,
               pool_size=171200, align_size=256)  # fmt: skip
T = datetime(2026, 11, 2, 9, 5, 32)


def _refused_after_resume() -> Round:
    """A round that resumed 11520 tokens of a chunk, then refused a request whose check
    line (printed after its prefix lock) shows the budget below 0."""
    r = Round(237, T)
    r.decisions.append(Decision("as-afbnir1wc9", 3849, 2784, 0, 768, 8880, -2688, -2688,
                                "pp0.log:768", "rejected"))  # fmt: skip
    r.pieces.append(Piece("as-f5gefulnh1", 26880, 38400, "resumed", INFERRED))
    return r


def test_the_lock_is_the_fall_from_the_previous_round_within_its_bounds():
    rnd = _refused_after_resume()
    # the budget shows 2688 below 1: at least 57 pages of 48 = 2736, at most the prefix
    least = first_lock(CFG48, rnd, None)
    assert least is not None and (least.value, least.interval) == (2736, (2736, 2784))
    # the walk before left 11664: the baseline fell by the whole prefix
    fell = first_lock(CFG48, rnd, Prov(11664, INFERRED))
    assert fell is not None and (fell.value, fell.interval) == (2784, (2736, 2784))
    assert "fell 2784" in fell.evidence[0]
    # a fall the bounds rule out (memory taken or returned meanwhile) is not the lock
    for before in (20000, 11000):
        other = first_lock(CFG48, rnd, Prov(before, INFERRED))
        assert other is not None and other.value == 2736


def test_the_walk_that_passes_over_a_last_piece_start():
    # the last piece of 45003 spent 6480 of the budget: it started in [38523, 38571)
    passing = walk_below(CFG48, Chunked("f", 45003, 38400), 96, 38523, 100)
    assert passing == [(38400, 96), (38496, 0)]
    assert walk_below(CFG48, Chunked("f", 45003, 38400), 144, 38523, 100) is None
    assert walk_below(CFG48, Chunked("f", 45003, 38400), 96, 38523, 1) is None


def _rebuilder(batch: int | None) -> Rebuilder:
    sizes = BatchSizes()
    if batch is not None:  # another rank's batch line of that size, at the same time
        sizes._time.append(pack_time(T))
        sizes._tokens.append(batch)
        sizes._line.append(57)
        sizes._file.append(0)
        sizes._order.append(0)
        sizes._files.append("pp3.log")
    rb = Rebuilder(CFG48, sizes)
    rb.chunked, rb.base_end = Chunked("f", 45003, 38400), Prov(96, INFERRED)
    return rb


def test_a_last_piece_the_walk_passes_over_rises_in_the_round_a_batch_line_shows():
    rb = _rebuilder(144)
    assert rb._rise_to_last(38523, T)
    (r,) = rb._held
    assert (r.pieces[0].start, r.pieces[0].end) == (38400, 38544)
    assert r.baseline is not None and r.baseline.value == 144
    assert "pp3.log:57" in r.baseline.evidence[0]
    assert rb.chunked == Chunked("f", 45003, 38544)


def test_without_a_batch_line_the_assumed_baseline_holds_as_long_as_it_can():
    rb = _rebuilder(None)
    assert rb._rise_to_last(38523, T)
    ends = [(r.pieces[0].start, r.pieces[0].end) for r in rb._held]
    assert ends == [(38400, 38496), (38496, 38544)]
    assert rb.chunked == Chunked("f", 45003, 38544)
    assert not rb.contradictions


def test_a_walk_that_lands_adds_nothing():
    rb = _rebuilder(None)
    rb.base_end = Prov(144, INFERRED)
    assert not rb._rise_to_last(38523, T)
    assert not rb._held and rb.chunked == Chunked("f", 45003, 38400)


def _oom(*paths: int) -> LoggedOom:
    return LoggedOom(16384, 0, 0, 0, "pp0.log:2026", tree_paths=paths)


def test_the_tree_dump_places_the_crash_piece_among_the_walks_starts():
    victim, base = Chunked("v", 81564, 43264), Prov(6656, OBSERVED)
    # the tree holds the victim's 43264 computed tokens: no silent round before the
    # crash (the baseline fell to 0 first), where the walk alone puts one of 6656
    assert tree_start(CFG64, victim, base, _oom(43264), 100) == 43264
    # a tree at the walk's next start: that round ran first
    assert tree_start(CFG64, victim, base, _oom(49920), 100) == 49920
    # no tree, or none of the walk's starts in it: the tree says nothing
    assert tree_start(CFG64, victim, base, _oom(), 100) is None
    assert tree_start(CFG64, victim, base, _oom(12345, 40000), 100) is None
    # two of them: the tree cannot tell which is the victim's
    assert tree_start(CFG64, victim, base, _oom(43264, 49920), 100) is None
