"""A ledger subclass that overrides ``add`` sees every adder step (the conformance harness
records through one)."""

from kvforensics.model import Config, PagePool, PrefillNode, Request, get_policy
from kvforensics.model.ledger import Ledger


class Counting(Ledger):
    __slots__ = ("seen",)

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def add(self, step) -> None:
        super().add(step)
        self.seen.append(step.call)


def test_overridden_add_sees_refusals_and_admissions():
    cfg = Config(page_size=1, chunked_prefill_size=64, max_prefill_tokens=64, pool_size=256)
    for free, want in ((0, ["add_one_req"]), (200, ["add_one_req", "allocate"])):
        pool = PagePool(page_size=1, size=256, free=free, evictable={})
        node = PrefillNode(cfg, get_policy("upstream"), pool, waiting=[Request("q0", 8)])
        node.ledger = led = Counting()
        node.step()
        assert led.seen == want and len(led) == len(want)
