"""Import stand-ins for packages that SGLang 0.5.23 imports at module load but that
cannot be installed on a CPU-only machine (or would drag in a CUDA torch).

The scheduler code the conformance harness runs (PrefillAdder, Req, PrefillBudget)
never calls into any of them; they are only reached through import chains. Each
stub is a permissive module: any attribute is a callable placeholder, so a
decorator, a class to subclass, or a constant all import cleanly. If the harness
ever *calls* a stub the placeholder raises, so a stub can never silently change a
result.

Why each stub exists (top-level name -> reason):
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

STUBS: dict[str, str] = {
    # PyPI's torchvision pins a torch release (a multi-GB CUDA build here) and its
    # wheel does not load beside the local CPU torch 2.13.0. Reached through
    # sglang.srt.multimodal.* (image preprocessing), imported by schedule_batch.
    "torchvision": "needs a matching torch build; only multimodal preprocessing uses it",
    # Apache TVM FFI is the loader for CUDA-built kernels (sglang.kernels.*); it is
    # reached from the communication/all-reduce ops that schedule_batch imports.
    "tvm_ffi": "CUDA kernel loader; only communication kernels use it",
    # sgl-kernel (SGLang's CUDA kernels, a 1.7 GB wheel that needs libnvrtc): 0.5.9
    # imports its KV-cache I/O ops at load in mem_cache/memory_pool_host.py (HiCache's
    # host pool), which the reference never builds.
    "sgl_kernel": "CUDA kernels; 0.5.9 imports them from the HiCache host pool module",
}

__doc__ += "".join(f"    {k}: {v}\n" for k, v in STUBS.items())


class _Placeholder:
    """Stands for any object from a stubbed module. Usable as a base class, a
    decorator (returns the wrapped object), or a value; calling it with anything
    but a single callable raises."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, item: str):
        if item.startswith("__") and item.endswith("__"):
            raise AttributeError(item)
        return _Placeholder(f"{self._name}.{item}")

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]  # used as a decorator
        raise RuntimeError(f"stubbed {self._name} was called by the conformance harness")

    def __mro_entries__(self, bases):
        return (type(self._name.rsplit(".", 1)[-1], (), {}),)

    def __repr__(self) -> str:
        return f"<stub {self._name}>"


class _StubModule(types.ModuleType):
    def __getattr__(self, item: str):
        if item.startswith("__") and item.endswith("__"):
            raise AttributeError(item)
        return _Placeholder(f"{self.__name__}.{item}")


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".", 1)[0] in STUBS:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = _StubModule(spec.name)
        mod.__path__ = []  # a package: submodules resolve through this finder
        mod.__conformance_stub__ = True
        return mod

    def exec_module(self, module):
        pass


def install() -> None:
    """Put the stub finder last on sys.meta_path (real packages always win).

    transformers probes for torchvision once, when its import utilities load, and
    would then ask for the stub's (absent) distribution version; loading those
    utilities first makes it record torchvision as not installed, which is true.
    """
    import transformers.utils.import_utils  # noqa: F401  (probe before the stubs exist)

    if not any(isinstance(f, _StubFinder) for f in sys.meta_path):
        sys.meta_path.append(_StubFinder())
