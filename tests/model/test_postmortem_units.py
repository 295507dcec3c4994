"""The postmortem's two unit tests (page 64, chunk 704, align 256).

Each test states what the fix does (``fixed``) and what the code without it did (``prefix``).
"""

from kvforensics.model import Config, PagePool, PrefillNode, Request, get_policy

CFG = Config(
    page_size=64, chunked_prefill_size=704, max_prefill_tokens=704, pool_size=65536, align_size=256
)


def truncated_tail_round(policy: str):
    """A long request truncated (704 -> end 704 aligned to 512: 192 of budget left), then a
    request that computes 128 but loads back 3968."""
    pool = PagePool(page_size=64, size=CFG.pool_size, free=6016)
    long = Request("long", 2000)
    loader = Request("loader", 4096, host_hit=3968)
    node = PrefillNode(CFG, get_policy(policy), pool, waiting=[long, loader])
    rec = node.step()
    load_backs = [op for op in pool.ops if op.op == "load_back"]
    return rec, loader, load_backs


def resumed_tail_round(policy: str):
    """A chunked request resumed at 512 (704 -> end 1216 aligned to 1024), then a small one."""
    pool = PagePool(page_size=64, size=CFG.pool_size, free=2048)
    half = Request("half", 3000)
    half.done = 512
    pool.hold("half", 512)
    small = Request("small", 192)
    node = PrefillNode(CFG, get_policy(policy), pool, waiting=[small], chunked=half)
    return node.step(), small


def test_truncated_tail_blocks_host_load_back_under_fixed_only():
    rec, loader, load_backs = truncated_tail_round("fixed")
    assert rec.pieces == [("long", 0, 512)]
    assert load_backs == [] and loader.admitted_round is None
    # Under prefix the tail is promised to nobody: the loader comes through the gap.
    rec, loader, load_backs = truncated_tail_round("prefix")
    assert rec.pieces == [("long", 0, 512), ("loader", 3968, 4096)]
    assert [(op.owner, op.tokens) for op in load_backs] == [("loader", 3968)]
    assert loader.admitted_round == 0


def test_resumed_tail_blocks_waiting_admission_under_fixed_only():
    rec, small = resumed_tail_round("fixed")
    assert rec.pieces == [("half", 512, 1024)]
    assert small.admitted_round is None
    rec, small = resumed_tail_round("prefix")
    assert rec.pieces == [("half", 512, 1024), ("small", 0, 192)]
    assert small.admitted_round == 0
