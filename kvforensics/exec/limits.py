"""How much memory a plan's execution takes, and the check that refuses one that cannot
fit before anything is allocated.

The slot count is the pool's own and cannot be scaled down (it decides where the
out-of-memory falls); what a run can change is the layout (``--layers``, ``--kv-dim``,
``--rope-dim``, ``--dtype``) and the device. On the CPU the run is a check of the
arithmetic at a small layout, so what it allocates on the host is held to a fixed bound
that keeps the whole process well under 1 GiB; on CUDA the pool must fit the device's
free memory and the host-cache copies the host's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from rich import filesize

from kvforensics.errors import InputError
from kvforensics.exec.kvcache import KvLayout
from kvforensics.exec.plan import Plan

#: what a CPU run may allocate: the KV pool, the host-cache copies and the page records
CPU_BYTES = 128 << 20
#: the allocator's bookkeeping per page, an upper bound (a free-list slot and its int,
#: or a page record while held)
PAGE_BYTES = 160
#: the per-row index tensors a write or the integrity check builds on the host (slot,
#: position and seed of every row, and their intermediates)
INDEX_BYTES = 64
#: the share of the device's (or the host's) free memory a CUDA run may take
CUDA_SHARE = 0.9


@dataclass(frozen=True, slots=True)
class Footprint:
    """Bytes a plan's execution allocates, by where they live."""

    kv: int  # the KV pool (on the device)
    host_rows: int  # the host-cache copies of what is loaded back
    books: int  # the allocator's records and the row indexes, always on the host

    def on_host(self, device: str) -> int:
        return self.host_rows + self.books + (0 if device.startswith("cuda") else self.kv)


def footprint(plan: Plan, layout: KvLayout) -> Footprint:
    per_slot = layout.bytes_per_slot()
    snap = plan.snapshot
    loaded = sum(s.end - s.start for s in plan.steps if s.kind == "load_back")
    return Footprint(
        snap.size * per_slot, loaded * per_slot, snap.size // snap.page_size * PAGE_BYTES
    )


def check_fits(plan: Plan, layout: KvLayout, device: str) -> None:
    """A one-line error (exit 2) naming the pool, the layout, the need and the limit."""
    fp = footprint(plan, layout)
    what = (
        f"exec: a pool of {plan.snapshot.size} slots at {layout.bytes_per_slot()} bytes a slot "
        f"({layout.layers} layer(s) x ({layout.kv_lora_rank} + {layout.rope_dim}) "
        f"{str(layout.dtype).removeprefix('torch.')})"
    )
    if device.startswith("cuda"):
        import torch

        free_dev = torch.cuda.mem_get_info(torch.device(device))[0]
        if fp.kv > CUDA_SHARE * free_dev:
            raise InputError(
                f"{what} needs {_size(fp.kv)} on {device}, over the {_size(CUDA_SHARE * free_dev)} "
                "free there; lower --layers, --kv-dim or --rope-dim"
            )
        host_limit = CUDA_SHARE * _host_available()
        where = "of the host's available memory"
    else:
        host_limit = CPU_BYTES
        where = f"exec allows on {device}"
    need = fp.on_host(device)
    if need > host_limit:
        # the bookkeeping grows with the slot count alone: no layout makes it fit
        hint = (
            "the pool itself is too large to execute (its size is the log's "
            "max_total_num_tokens or --pool-size)"
            if fp.books > host_limit
            else "lower --layers, --kv-dim or --rope-dim, or run on CUDA"
        )
        raise InputError(
            f"{what} needs {_size(need)} on the host, over the {_size(host_limit)} {where}; "
            + hint
        )


def _host_available() -> int:
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return CPU_BYTES


def _size(n: float) -> str:
    return filesize.decimal(int(n))
