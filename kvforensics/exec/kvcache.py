"""The KV pool as tensors, in the incident model's MLA layout, plus the row writes and the
integrity read-back that the executor does on it.

MLA keeps one row per layer and slot: a ``kv_lora_rank``-wide compressed latent followed
by the ``rope_dim`` rope part (Kimi/DeepSeek: 512 + 64, bf16). One tensor [L, S, W] with
exactly the plan's pool size in slots; every size is a parameter so a CPU run can keep the
slot count (and so the out-of-memory point) exact with a tiny width.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from kvforensics.exec import content
from kvforensics.exec.allocator import Page, Run
from kvforensics.exec.store import StoreFn

#: bytes of int64 scratch the hashing may use at once (bounds memory at full size); on
#: the CPU the scratch shares the host with everything else, so it is kept smaller
SCRATCH_BYTES = 256 << 20
CPU_SCRATCH_BYTES = 16 << 20


@dataclass(frozen=True, slots=True)
class KvLayout:
    layers: int
    kv_lora_rank: int
    rope_dim: int
    dtype: torch.dtype = torch.bfloat16

    @property
    def width(self) -> int:
        return self.kv_lora_rank + self.rope_dim

    @property
    def dtype_name(self) -> str:
        """``bfloat16``, not ``torch.bfloat16``."""
        return str(self.dtype).removeprefix("torch.")

    def bytes_per_slot(self) -> int:
        return self.layers * self.width * torch.empty(0, dtype=self.dtype).element_size()

    def as_dict(self) -> dict[str, Any]:
        return {
            "layers": self.layers,
            "kv_lora_rank": self.kv_lora_rank,
            "rope_dim": self.rope_dim,
            "dtype": self.dtype_name,
        }


def expand(runs: Sequence[Run], device: torch.device | str) -> tuple[torch.Tensor, ...]:
    """Runs -> per-row (slot, position, seed) tensors, built with tensor ops (no row loop)."""
    if not runs:
        z = torch.zeros(0, dtype=torch.int64, device=device)
        return z, z, z
    t = torch.tensor(runs, dtype=torch.int64)
    lens = t[:, 1]
    total = int(lens.sum())
    within = torch.arange(total, dtype=torch.int64) - torch.repeat_interleave(
        torch.cumsum(lens, 0) - lens, lens
    )
    slot = torch.repeat_interleave(t[:, 0], lens) + within
    pos = torch.repeat_interleave(t[:, 2], lens) + within
    seed = torch.repeat_interleave(t[:, 3], lens)
    return slot.to(device), pos.to(device), seed.to(device)


class KvCache:
    def __init__(self, layout: KvLayout, slots: int, device: str, store: StoreFn):
        self.layout, self.device, self.store = layout, torch.device(device), store
        self.kv = torch.zeros(
            (layout.layers, slots, layout.width), dtype=layout.dtype, device=self.device
        )
        self.cols = content.column_keys(range(layout.layers), layout.width, self.device)
        scratch = SCRATCH_BYTES if self.device.type == "cuda" else CPU_SCRATCH_BYTES
        self.chunk = max(1, scratch // (8 * layout.layers * layout.width))
        self.rows_written = 0

    # -- writes ---------------------------------------------------------------
    def write(self, runs: Sequence[Run]) -> None:
        """Compute the rows' KV (hash -> values -> dtype, in torch) and store them."""
        slot, pos, seed = expand(runs, self.device)
        for a in range(0, slot.numel(), self.chunk):
            b = a + self.chunk
            src = content.generate(content.row_keys(seed[a:b], pos[a:b]), self.cols, self.kv.dtype)
            self.store(self.kv, slot[a:b], src)
        self.rows_written += slot.numel()

    def host_rows(self, seed: int, start: int, end: int) -> torch.Tensor:
        """A host-cache copy of tokens [start, end) of one request, token-major [n, L, W]
        as a host KV pool keeps it; pinned when CUDA is there so the copy is async DMA."""
        n = end - start
        host = torch.empty(
            (n, self.layout.layers, self.layout.width),
            dtype=self.layout.dtype,
            pin_memory=self.device.type == "cuda",
        )
        for a in range(0, n, self.chunk):
            b = min(n, a + self.chunk)
            pos = torch.arange(start + a, start + b, device=self.device)
            seeds = torch.full_like(pos, seed)
            vals = content.generate(content.row_keys(seeds, pos), self.cols, self.kv.dtype)
            host[a:b].copy_(vals.permute(1, 0, 2))
        return host

    def load_back(self, runs: Sequence[Run], host: torch.Tensor, start: int) -> None:
        """Copy host rows into freshly allocated slots: H2D into a staging buffer, then the
        same store as a computed piece."""
        slot, pos, _ = expand(runs, self.device)
        off = (pos - start).cpu()
        for a in range(0, slot.numel(), self.chunk):
            b = a + self.chunk
            lo, hi = int(off[a]), int(off[min(b, slot.numel()) - 1]) + 1
            if hi - lo == min(b, slot.numel()) - a:  # contiguous token range: one DMA
                rows = host[lo:hi]
            else:
                rows = host.index_select(0, off[a:b])
            staged = rows.to(self.device, non_blocking=True)
            self.store(self.kv, slot[a:b], staged.permute(1, 0, 2))
        self.rows_written += slot.numel()

    # -- integrity ------------------------------------------------------------
    def check(self, holders: Sequence[tuple[str, Sequence[Page]]], page: int) -> list[str]:
        """Read every live row back and compare it with what its holder should hold.

        Expectations come from the holders (whose tokens, which positions), not from any
        slot table: a slot handed to two holders fails for one of them.
        """
        runs, owner = [], []
        for h, (_, pages) in enumerate(holders):
            for r in (r for pg in pages for r in pg.records()):
                if r.hi > r.lo:
                    runs.append((r.id * page + r.lo, r.hi - r.lo, r.pos0 + r.lo, r.seed))
                    owner.append(h)
        slot, pos, seed = expand(runs, self.device)
        bad = []
        for a in range(0, slot.numel(), self.chunk):
            b = a + self.chunk
            got = self.kv.index_select(1, slot[a:b])
            want = content.generate(content.row_keys(seed[a:b], pos[a:b]), self.cols, self.kv.dtype)
            rows = (got != want).any(dim=2).any(dim=0)
            if bool(rows.any()):
                bad.append(rows.nonzero().flatten().cpu() + a)
        if not bad:
            return []
        bad_rows = torch.cat(bad)
        lens = torch.tensor([r[1] for r in runs])
        run_of = torch.repeat_interleave(torch.arange(len(runs)), lens)[bad_rows]
        who = torch.tensor(owner)[run_of]
        out = []
        slot_cpu, pos_cpu = slot.cpu(), pos.cpu()
        for h in who.unique().tolist():  # type: ignore[no-untyped-call]  # torch leaves it unannotated
            mine = bad_rows[who == h]
            name = holders[h][0]
            out.append(
                f"{name}: {mine.numel()} rows differ (first slot {int(slot_cpu[mine[0]])}, "
                f"token {int(pos_cpu[mine[0]])})"
            )
        return out
