"""Store backends: write rows of KV into their slots, in every layer at once.

* ``triton``: the compiled kernel (CUDA).
* ``interpret``: the same kernel under Triton's interpreter (CPU; a correctness oracle).
* ``torch``: ``index_copy_`` (CPU, and a reference on CUDA).

All of them get the pool and the rows as integer views of the same width, made here, so
a backend never converts values.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import torch

from kvforensics.errors import KvfError

BACKENDS = ("auto", "triton", "torch", "interpret")
INSTALL_HINT = "install the gpu extra: pip install -e '.[gpu]' (torch and triton)"

StoreFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None]

_WORDS = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}


def _fits(t: torch.Tensor, size: int) -> bool:
    return (
        t.shape[-1] * t.element_size() % size == 0
        and t.data_ptr() % size == 0
        and all(s * t.element_size() % size == 0 for s in t.stride()[:-1])
    )


def word_views(*ts: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The widest integer views (one word size for all) whose words tile the rows exactly:
    bf16 x 576 -> int64 x 144. Rows must have unit stride along the last dim."""
    for size, dt in _WORDS.items():
        if all(_fits(t, size) for t in ts):
            return tuple(t.view(dt) for t in ts)
    raise AssertionError("unreachable: 1-byte words always fit")


def word_view(t: torch.Tensor) -> torch.Tensor:
    return word_views(t)[0]


def _torch_store(kv: torch.Tensor, idx: torch.Tensor, src: torch.Tensor) -> None:
    # Integer words: index_copy_ has no kernel for some dtypes (fp8), and bits are bits.
    kvw, srcw = word_views(kv, src)
    kvw.index_copy_(1, idx, srcw)


def _import_triton_store(interpret: bool) -> Callable[..., None]:
    """Load the kernel module with the interpreter switched on or off; its ``store_rows``.

    ``TRITON_INTERPRET`` is read when kernels are defined; once triton and the kernel
    module are loaded one way this process cannot switch, so say how to get the other.
    """
    want = "1" if interpret else ""
    have = os.environ.get("TRITON_INTERPRET", "")
    loaded = "kvforensics.exec._triton_store" in sys.modules
    if (have == "1") != interpret:
        if loaded or "triton" in sys.modules:
            mode = "interpreted" if have == "1" else "compiled"
            raise KvfError(
                f"triton is already loaded {mode} in this process; run a separate process "
                f"(set TRITON_INTERPRET={want or 0} before it starts)"
            )
        if interpret:
            os.environ["TRITON_INTERPRET"] = "1"
        else:
            os.environ.pop("TRITON_INTERPRET", None)
    try:
        from kvforensics.exec import _triton_store
    except ImportError as exc:
        raise KvfError(
            f"the {'interpret' if interpret else 'triton'} backend needs triton: {INSTALL_HINT}"
        ) from exc
    return _triton_store.store_rows


def resolve(device: str | None, backend: str) -> tuple[str, str]:
    """Pick (device, backend): CUDA runs the compiled kernel, CPU runs index_copy_."""
    if backend not in BACKENDS:
        raise KvfError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
    cuda = torch.cuda.is_available()
    if device is None:
        device = "cuda" if cuda else "cpu"
    if device.startswith("cuda") and not cuda:
        raise KvfError("--device cuda: no CUDA device here; use --device cpu")
    if not (device == "cpu" or device.startswith("cuda")):
        raise KvfError(f"unknown device {device!r}; use cuda or cpu")
    on_cuda = device.startswith("cuda")
    if backend == "auto":
        backend = "triton" if on_cuda else "torch"
    if backend == "triton" and not on_cuda:
        raise KvfError(
            "the compiled Triton kernel needs CUDA; on CPU use --backend torch or interpret"
        )
    if backend == "interpret" and on_cuda:
        raise KvfError("the Triton interpreter runs on CPU tensors; use --device cpu")
    return device, backend


def get_store(backend: str, **kernel_opts: int) -> StoreFn:
    """A function ``store(kv, idx, src)``: kv [L, S, W], idx int64 [n], src [L, n, W]."""
    if backend == "torch":
        return _torch_store
    kernel = _import_triton_store(backend == "interpret")

    def store(kv: torch.Tensor, idx: torch.Tensor, src: torch.Tensor) -> None:
        kvw, srcw = word_views(kv, src)
        kernel(kvw, idx, srcw, **kernel_opts)

    return store
