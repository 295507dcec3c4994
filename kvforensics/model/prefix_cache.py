"""Prefix hits from block hashes, for trace-driven runs (Mooncake: 512-token blocks).

The device cache is the pool itself: a block is on the device while the pool holds a
cache entry under its key. The host cache (HiCache) is an LRU of block keys with a
capacity in tokens; every finished request's blocks are written through to it.
"""

from __future__ import annotations

from collections import OrderedDict

from mypy_extensions import mypyc_attr

from kvforensics.model.config import Config
from kvforensics.model.pool import PagePool
from kvforensics.model.radix import RadixPagePool
from kvforensics.model.request import Request


@mypyc_attr(allow_interpreted_subclasses=True)  # copy and pickle make one without __init__
class BlockPrefixCache:
    def __init__(self, cfg: Config, *, block_size: int, host_capacity: int):
        if block_size % cfg.page_size:
            raise ValueError(f"block size {block_size} is not a multiple of page {cfg.page_size}")
        self.cfg = cfg
        self.block_size = block_size
        self.host_capacity = host_capacity
        self.host: OrderedDict[str, int] = OrderedDict()
        self.host_tokens = 0
        self.blocks: dict[str, tuple[int, ...]] = {}

    def add(self, rid: str, hash_ids: tuple[int, ...]) -> None:
        self.blocks[rid] = hash_ids

    def _sizes(self, req: Request) -> list[tuple[str, int]]:
        bs, n = self.block_size, req.seq_len
        return [(f"b{h}", min(bs, n - i * bs)) for i, h in enumerate(self.blocks[req.rid])]

    def match(self, req: Request, pool: PagePool) -> None:
        blocks = self._sizes(req)
        ceil = self.cfg.ceil_page
        dev = i = 0
        while i < len(blocks) and pool.cached(blocks[i][0]) >= ceil(blocks[i][1]):
            dev += blocks[i][1]
            i += 1
        n_dev = i
        host = 0
        while i < len(blocks) and blocks[i][0] in self.host:
            host += blocks[i][1]
            self.host.move_to_end(blocks[i][0])
            i += 1
        # At least one token must be computed; prefixes end on a page.
        cap = self.cfg.floor_page(req.seq_len - 1)
        dev = min(dev, cap)
        host = min(host, cap - dev)
        req.device_prefix, req.host_hit = dev, host
        req.prefix_keys = tuple(k for k, _ in blocks[:n_dev])
        req.cache_keys = tuple((k, ceil(t)) for k, t in blocks[n_dev:])

    def on_transfer_done(self, req: Request) -> None:
        for key, tokens in self._sizes(req):
            if key in self.host:
                self.host.move_to_end(key)
                continue
            self.host[key] = tokens
            self.host_tokens += tokens
        while self.host_tokens > self.host_capacity and self.host:
            _, t = self.host.popitem(last=False)
            self.host_tokens -= t

    def checkpoint(self, req: Request, end: int, pool: PagePool) -> None:
        """Nothing: a request's blocks become cache when its transfer ends."""


@mypyc_attr(allow_interpreted_subclasses=True)  # copy and pickle make one without __init__
class RadixPrefixCache:
    """Prefix hits from SGLang's radix tree (``RadixPagePool.tree``), for trace-driven
    runs on a radix cache with no host tier. Block ``h`` of ``block_size`` tokens is the
    same tokens in every request that has it, so a page is named by its block and its
    place in the block, and requests that share leading blocks share a path.

    The request's side of SGLang's steps: ``match`` is ``init_next_round_input`` (the
    match is cut to ``seq_len - 1`` tokens, then to whole pages), ``checkpoint`` is
    ``checkpoint_kv_cache`` after every forward, ``on_transfer_done`` the tree side of
    ``release_kv_cache`` (the pool frees the partial last page).
    """

    def __init__(self, cfg: Config, pool: RadixPagePool, *, block_size: int):
        if block_size % cfg.page_size:
            raise ValueError(f"block size {block_size} is not a multiple of page {cfg.page_size}")
        self.cfg, self.pool, self.block_size = cfg, pool, block_size
        self.blocks: dict[str, tuple[int, ...]] = {}
        #: rid -> tokens of its row the tree owns (``cache_protected_len``)
        self.protected: dict[str, int] = {}

    def add(self, rid: str, hash_ids: tuple[int, ...]) -> None:
        self.blocks[rid] = hash_ids

    def _key(self, req: Request, tokens: int) -> tuple[int, ...]:
        """Page ids of the first ``tokens`` (whole pages) of ``req``."""
        p, bs = self.cfg.page_size, self.block_size
        per = bs // p
        blocks = self.blocks[req.rid]
        return tuple(blocks[t // bs] * per + t % bs // p for t in range(0, tokens - p + 1, p))

    def match(self, req: Request, pool: PagePool) -> None:
        tokens, node = self.pool.tree.match(self._key(req, self.cfg.floor_page(req.seq_len - 1)))
        req.device_prefix, req.host_hit, req.cache_keys = tokens, 0, ()
        req.prefix_keys = self.pool.handle(node)
        self.protected[req.rid] = tokens

    def checkpoint(self, req: Request, end: int, pool: PagePool) -> None:
        key = self._key(req, self.cfg.floor_page(end))
        req.prefix_keys = self.pool.checkpoint(
            req.rid, key, self.protected[req.rid], req.prefix_keys
        )
        self.protected[req.rid] = len(key) * self.cfg.page_size

    def on_transfer_done(self, req: Request) -> None:
        self.pool.touch(self._key(req, self.cfg.floor_page(req.seq_len)))
        del self.protected[req.rid]
