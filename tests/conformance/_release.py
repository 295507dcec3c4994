"""Which SGLang release this reference interpreter holds, and the few places where the
reference driver (``sglang_ref.py``) must speak that release's API.

Runs only inside a reference venv (``.venv-sglang`` for 0.5.23, ``.venv-sglang-X.Y.Z``
for the other releases; ``scripts/conformance_env.sh``). Nothing here changes what a
release decides: each helper only builds the inputs or reads the outputs the way that
release's own scheduler does.

API eras the driver meets (the adder's *rules* by release are in
``docs/sglang-releases.md``):

* ``MODERN`` (0.5.22 and later): ``Req.prefix_len`` / ``extend_end``, the adder's books in
  a ``PrefillBudget`` made by the allocator (``mem_cache/prefill_budget.py``),
  ``init_load_back`` returns the loaded length, the runtime config is published with
  ``get_context().override_server_args``.
* before 0.5.22: ``Req.prefix_indices`` (a tensor), the offsets are adder attributes
  (``rem_total_token_offset``, ``cur_rem_token_offset``), ``init_load_back`` returns the
  loaded indices; a waiting request's match comes from ``Req.init_next_round_input``
  calling ``tree_cache.match_prefix`` (the driver's tree answers it with the round spec's
  device prefix and host hit), as in the scheduler's queue loop.

Import shim: a release pins an older ``transformers`` than the shared reference deps
(``tests/conformance/requirements-sglang.txt``). SGLang registers its own model configs
with ``AutoConfig.register``; the newer ``transformers`` already knows some of those names
(e.g. ``qwen3_asr``) and refuses a second registration. The shim passes ``exist_ok=True``:
model configs are never read by the scheduler code the harness runs.
"""

from __future__ import annotations

import dataclasses
import os
import re

import _stubs

_stubs.install()
os.environ.setdefault("SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION", "4096")


def _tolerate_known_configs() -> None:
    from transformers import AutoConfig

    register = AutoConfig.register

    def tolerant(model_type, config, exist_ok=False):
        return register(model_type, config, exist_ok=True)

    AutoConfig.register = staticmethod(tolerant)


_tolerate_known_configs()

import sglang  # noqa: E402
import torch  # noqa: E402
from sglang.srt.managers.schedule_batch import Req  # noqa: E402
from sglang.srt.managers.schedule_policy import AddReqResult, PrefillAdder  # noqa: E402
from sglang.srt.mem_cache import base_prefix_cache as _bpc  # noqa: E402
from sglang.srt.mem_cache.base_prefix_cache import BasePrefixCache  # noqa: E402
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402

SGLANG_VERSION: str = sglang.__version__
RELEASE: tuple[int, ...] = tuple(int(x) for x in re.findall(r"\d+", SGLANG_VERSION)[:3])
MODERN = RELEASE >= (0, 5, 22)
#: ``Scheduler._get_new_batch_prefill_raw`` stops before a waiting candidate when the
#: adder's ``budget_state()`` is ``OTHER`` from 0.5.23 on; earlier loops call
#: ``add_one_req`` for the first candidate whatever the budget says.
LOOP_BREAKS_ON_OTHER = RELEASE >= (0, 5, 23)

__all__ = ["AddReqResult", "BasePrefixCache", "PrefillAdder", "Req", "SamplingParams"]


def lock_results():
    """(IncLockRefResult, DecLockRefResult) factories; None where the release has none
    (0.5.9's locks return nothing)."""
    inc = getattr(_bpc, "IncLockRefResult", None)
    dec = getattr(_bpc, "DecLockRefResult", None)
    return (inc or (lambda: None)), (dec or (lambda: None))


def allocator_base_methods() -> dict:
    """The real base-allocator methods the 0.5.22+ adder calls on its allocator (so it
    gets the real ``PrefillBudget``); nothing before 0.5.22."""
    if not MODERN:
        return {}
    from sglang.srt.mem_cache.allocator.base import BaseTokenToKVPoolAllocator as B

    return {"create_prefill_budget": B.create_prefill_budget,
            "request_slot_reserve": B.request_slot_reserve}  # fmt: skip


_PUBLISHED: dict = {}


def publish_config(schedule_policy: str) -> None:
    """Publish a default ServerArgs once per schedule policy: the adder reads a few of
    its fields (the schedule policy, context-parallel switches). From 0.5.16 through
    ``get_context().override_server_args``; before, ``set_global_server_args_for_scheduler``."""
    if _PUBLISHED.get("policy") == schedule_policy:
        return
    try:
        from sglang.srt.runtime_context import get_context
    except ImportError:
        get_context = None
    if get_context is None or not hasattr(get_context(), "override_server_args"):
        from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

        set_global_server_args_for_scheduler(
            ServerArgs(model_path="dummy", schedule_policy=schedule_policy)
        )
        _PUBLISHED["policy"] = schedule_policy
        return
    prev = _PUBLISHED.pop("override", None)
    if prev is not None:
        prev.restore()
    ov = get_context().override_server_args(schedule_policy=schedule_policy)
    ov.install()
    _PUBLISHED.update(policy=schedule_policy, override=ov)


def match_result(device: int, node, host: int):
    """What ``match_prefix`` returns for a device hit of ``device`` tokens ending at
    ``node`` and a host hit of ``host`` tokens (pre-0.5.22 releases)."""
    cls = _bpc.MatchResult  # a NamedTuple; later releases a dataclass
    names = set(getattr(cls, "_fields", ())) or {f.name for f in dataclasses.fields(cls)}
    values = {
        "device_indices": torch.zeros(device, dtype=torch.int64),
        "last_device_node": node,
        "last_host_node": node,
        "best_match_node": node,
        "host_hit_length": host,
    }
    return cls(**{k: v for k, v in values.items() if k in names})


def loaded_indices(n: int):
    """The device indices a pre-0.5.22 ``init_load_back`` returns for ``n`` tokens."""
    return torch.zeros(n, dtype=torch.int64)


def piece(req) -> tuple[int, int]:
    """The admitted piece ``[start, end)`` as the release keeps it on the request."""
    if MODERN:
        return req.prefix_len, req.extend_end
    rng = getattr(req, "extend_range", None)
    if rng is not None:
        return rng.start, rng.end
    start = len(req.prefix_indices)
    return start, start + req.extend_input_len


def offsets(adder) -> tuple[int, int]:
    """(rem_total_token_offset, cur_rem_token_offset) after a call."""
    if MODERN:
        b = adder.memory_budget
        return int(b.total_offset), int(b.current_offset)
    return int(adder.rem_total_token_offset), int(adder.cur_rem_token_offset)


def make_input_ids(n: int):
    """Prompt token ids in the container type the release's ``Req`` concatenates."""
    from array import array

    return array("q", [1] * n) if RELEASE >= (0, 5, 13) else [1] * n
