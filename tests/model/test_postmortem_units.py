"""The postmortem's two unit tests (page 64, chunk 704, align 256).

Each check states the fix's behaviour; it passes under ``fixed`` and fails under ``prefix``.
"""

import pytest

from kvforensics.model import Config, PagePool, PrefillNode, Request, get_policy

CFG = Config(
    page_size=64, chunked_prefill_size=704, max_prefill_tokens=704, pool_size=65536, align_size=256
)


def check_truncated_req_tail_blocks_host_load_back_admission(policy: str) -> None:
    pool = PagePool(page_size=64, size=CFG.pool_size, free=6016)
    long = Request("long", 2000)  # 704 -> end 704 aligned to 512: 192 of budget left
    loader = Request("loader", 4096, host_hit=3968)  # computes 128, loads back 3968
    node = PrefillNode(CFG, get_policy(policy), pool, waiting=[long, loader])
    rec = node.step()
    assert [p[0] for p in rec.pieces] == ["long"]
    assert rec.pieces[0][1:] == (0, 512)
    assert not any(op.op == "load_back" for op in pool.ops), "init_load_back was called"
    assert loader.admitted_round is None


def check_resumed_chunk_tail_blocks_waiting_admission(policy: str) -> None:
    pool = PagePool(page_size=64, size=CFG.pool_size, free=2048)
    half = Request("half", 3000)
    half.done = 512
    pool.held["half"] = 512
    small = Request("small", 192)
    node = PrefillNode(CFG, get_policy(policy), pool, waiting=[small], chunked=half)
    rec = node.step()
    assert rec.pieces == [("half", 512, 1024)]  # 704 -> end 1216 aligned to 1024
    assert small.admitted_round is None


@pytest.mark.parametrize(
    "check",
    [
        check_truncated_req_tail_blocks_host_load_back_admission,
        check_resumed_chunk_tail_blocks_waiting_admission,
    ],
)
def test_passes_with_fix_fails_without(check):
    check("fixed")
    with pytest.raises(AssertionError):
        check("prefix")
