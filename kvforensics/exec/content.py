"""Deterministic KV content: what a token's rows hold is a function of (content seed,
token position, layer, column), so the writer and the integrity check agree without
storing a copy of the cache.

Integer hashing in int64 torch ops, masked to 31 bits before each multiply so nothing
overflows: the values are bit-identical on CPU and CUDA. Each value is an integer in
[-128, 127], exact in bf16/fp16/fp32; the cast to the pool's dtype happens here, in torch,
so the store kernels only move bits.
"""

from __future__ import annotations

import zlib

import torch

_M31 = 0x7FFFFFFF


def seed_of(name: str) -> int:
    """A stable 31-bit seed for a request id or cache key (not Python's salted hash)."""
    return zlib.crc32(name.encode()) & _M31


def _mix(z: torch.Tensor) -> torch.Tensor:
    z = z & _M31
    z = ((z ^ (z >> 16)) * 0x45D9F3B) & _M31
    z = ((z ^ (z >> 16)) * 0x45D9F3B) & _M31
    return z ^ (z >> 16)


def row_keys(seeds: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """One well-mixed key per token row (int64, [n])."""
    return _mix(seeds.to(torch.int64) ^ _mix(pos.to(torch.int64) + 0x1234567))


def column_keys(layers: range, width: int, device: torch.device | str) -> torch.Tensor:
    ly = torch.tensor(list(layers), dtype=torch.int64, device=device)
    col = torch.arange(width, dtype=torch.int64, device=device)
    return _mix(ly[:, None] * 65599 + col[None, :] + 0x2545F49)


def generate(rows: torch.Tensor, cols: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Values for ``rows`` (row_keys, [n]) × ``cols`` (column_keys, [L, W]) -> [L, n, W]."""
    x = rows[None, :, None] ^ cols[:, None, :]
    x = (x * 0x2C1B3C6D) & _M31
    x = x ^ (x >> 13)
    return (((x >> 7) & 0xFF) - 128).to(torch.float32).to(dtype)
