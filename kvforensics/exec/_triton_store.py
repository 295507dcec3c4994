"""The Triton store kernel. Imported only through ``store.triton_store`` so that the
interpreter switch (``TRITON_INTERPRET``) is decided before ``triton`` is first imported.

The kernel only moves bits: rows of ``src`` go to rows ``idx`` of ``dst`` in every layer.
Callers hand it integer views of the pool (any cast happened in torch before), so the
same kernel serves bf16, fp16, fp32 and fp8 pools, and the interpreter (numpy has no
bf16) sees plain integers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import triton
import triton.language as tl

if TYPE_CHECKING:
    import torch


# triton is untyped, and it reads a kernel's annotations itself (``tl.constexpr``): the
# kernel's other parameters stay unannotated
@triton.jit  # type: ignore[untyped-decorator]
def _store_rows(  # type: ignore[no-untyped-def]
    dst,
    src,
    idx,
    n_rows,
    dst_stride_layer,
    dst_stride_slot,
    src_stride_layer,
    src_stride_row,
    WIDTH: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_W: tl.constexpr,
):
    pid = tl.program_id(0)
    # 64-bit offsets: 61 layers x 262144 slots x 144 words is past 2**31.
    layer = tl.program_id(1).to(tl.int64)
    rows = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n_rows
    slot = tl.load(idx + rows, mask=row_ok, other=0).to(tl.int64)
    src_row = src + layer * src_stride_layer + rows.to(tl.int64)[:, None] * src_stride_row
    dst_row = dst + layer * dst_stride_layer + slot[:, None] * dst_stride_slot
    # The row width is a compile-time constant (one pool, one width): the loop unrolls and
    # a width that is a power of two needs no column mask.
    for w0 in tl.static_range(0, WIDTH, BLOCK_W):
        cols = w0 + tl.arange(0, BLOCK_W)
        ok = row_ok[:, None] & (cols < WIDTH)[None, :]
        tl.store(dst_row + cols[None, :], tl.load(src_row + cols[None, :], mask=ok), mask=ok)


def store_rows(
    dst: torch.Tensor,
    idx: torch.Tensor,
    src: torch.Tensor,
    *,
    block_rows: int | None = None,
    block_w: int | None = None,
    num_warps: int = 4,
) -> None:
    """dst[l, idx[i], :] = src[l, i, :] for every layer l. ``dst`` [L, S, W] and ``src``
    [L, n, W] are same-typed integer views with unit stride along W; ``idx`` is int64 [n]."""
    n, width = idx.numel(), dst.shape[2]
    if n == 0:
        return
    # Default tile: the whole row (up to 1024 words) x enough rows for ~4096 words a
    # program; gpu_exec_check.py sweeps the alternatives on the real machine.
    block_w = block_w or min(triton.next_power_of_2(width), 1024)
    block_n = block_rows or max(1, 4096 // block_w)
    grid = (triton.cdiv(n, block_n), dst.shape[0])
    _store_rows[grid](
        dst,
        src,
        idx,
        n,
        dst.stride(0),
        dst.stride(1),
        src.stride(0),
        src.stride(1),
        WIDTH=width,
        BLOCK_N=block_n,
        BLOCK_W=block_w,
        num_warps=num_warps,
    )
