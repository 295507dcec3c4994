"""The stock analysis's typed records (retractions, crashes, batch trend, contradictions)
give, key for key and number for number, the JSON the command has always written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvforensics.replay import ReplayOptions, replay_logs
from kvforensics.replay.stock import NoAdderLines, StockAnalysis
from tests.stock.corpus import OOM_ABOVE_POOL, STOCK

RECORDS = ("retractions", "crashes", "batch_trend", "contradictions")
# pinned from the output of `replay --format json` before the records were typed: the
# text, not the parsed value, so that key order and 0 against 0.0 count
CRASH_CHUNK_64 = (
    '{"retractions": {"count": 0, "requests": null, "ranks": [], "first": null, "last": '
    'null}, "crashes": [{"kind": "exception", "device": null, "time": "2025-11-03 18:48:34", '
    '"rank": "TP7", "where": "2025-12567-tp7-crash.log:2", "exception": null}], '
    '"batch_trend": {"lines": 1, "until": "end of log", "last_lines": [{"where": '
    '"2025-12567-tp7-crash.log:1", "rank": "TP0", "new_seq": 1, "new_token": 64, '
    '"cached_token": 128, "token_usage": 0.0, "running_req": 0, "queue_req": 0}], '
    '"token_usage": {"first": 0.0, "last": 0.0, "max": 0.0}, "queue_req": {"first": 0, '
    '"last": 0, "max": 0}, "running_req": {"first": 0, "last": 0, "max": 0}, "new_token": '
    '{"max": 64, "chunk_size": 64, "full_chunks": 1}}, "contradictions": []}'
)
RETRACT = (
    '{"count": 1, "requests": 1, "ranks": [], "first": "2025-docs-retract.log:1", '
    '"last": "2025-docs-retract.log:1", "last_new_token_ratio": 1.0}'
)


def _stock(path: Path, **overrides: int) -> StockAnalysis:
    with pytest.raises(NoAdderLines) as no:
        replay_logs([path], ReplayOptions(["fixed"], overrides=overrides))
    return no.value.stock()


def _records_json(a: StockAnalysis) -> str:
    d = a.as_dict()
    return json.dumps({k: d[k] for k in RECORDS}, default=str)


def test_a_crash_and_its_batch_lines_give_the_pinned_json():
    a = _stock(STOCK / "2025-12567-tp7-crash.log", chunked_prefill_size=64)
    assert _records_json(a) == CRASH_CHUNK_64
    (crash,) = a.crashes
    assert (crash.kind, crash.rank, crash.exception) == ("exception", "TP7", None)
    nt = a.trend.new_token
    assert nt is not None and (nt.max, nt.chunk_size, nt.full_chunks) == (64, 64, 1)
    assert a.trend.transferring_req is None  # no line prints it: no key either


def test_retractions_tell_the_last_ratio_only_when_there_is_one():
    a = _stock(STOCK / "2025-docs-retract.log")
    assert json.dumps(a.retractions.as_dict()) == RETRACT
    none = _stock(STOCK / "2025-12567-tp7-crash.log").retractions
    assert none.count == 0 and "last_new_token_ratio" not in none.as_dict()


def test_a_contradiction_is_a_record_and_the_same_json(tmp_path):
    log = tmp_path / "p.log"
    log.write_text(OOM_ABOVE_POOL)
    a = _stock(log)
    (c,) = a.contradictions
    assert c.what == "pool size" and "5000 free + evictable" in c.detail
    assert a.as_dict()["contradictions"] == [{"what": c.what, "detail": c.detail}]
    assert a.exit_code() == 3
