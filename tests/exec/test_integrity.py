"""A broken allocator must not go unnoticed: the read-back catches it."""

from __future__ import annotations

from kvforensics.exec import execute
from kvforensics.exec.allocator import PageAllocator


class HandsOutHeldPages(PageAllocator):
    """Hands the first page of an inflight request to every new allocation too."""

    def _take(self, n):
        ids = super()._take(n)
        victim = self.held.get("inflight-00")
        if victim and victim.pages:
            ids[0] = victim.pages[0].id
        return ids


class ForgetsFreedPages(PageAllocator):
    def release(self, owner, entries):
        h = self.held.get(owner)
        super().release(owner, entries)
        if h is not None:
            for _ in range(min(1, len(self.free))):
                self.free.pop()


def test_slot_handed_out_twice_is_caught(incident_plans):
    res = execute(incident_plans["fixed"], device="cpu", allocator_cls=HandsOutHeldPages)
    text = "\n".join(res.integrity)
    assert res.integrity
    # the structure check sees the double booking ...
    assert "held by" in text
    # ... and the read-back sees the overwritten rows of the first holder
    assert "inflight-00: " in text and "rows differ" in text
    assert res.as_dict()["integrity"] == res.integrity


def test_lost_pages_are_caught(incident_plans):
    res = execute(incident_plans["fixed"], device="cpu", allocator_cls=ForgetsFreedPages)
    assert any("pages lost" in f for f in res.integrity)


def test_corrupted_kv_is_caught(incident_plans, monkeypatch):
    """A store that drops its last row leaves a stale row behind."""
    import kvforensics.exec.kvcache as kvcache

    real = kvcache.KvCache.write

    def lossy(self, runs):
        real(self, runs)
        if runs:
            slot = runs[-1][0] + runs[-1][1] - 1
            self.kv[:, slot] += 1

    monkeypatch.setattr(kvcache.KvCache, "write", lossy)
    res = execute(incident_plans["fixed"], device="cpu", check_rounds=False)
    assert any("rows differ" in f for f in res.integrity)
