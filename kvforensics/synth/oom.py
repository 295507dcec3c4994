"""The out-of-memory block: the allocator's message, the radix tree dump that follows it,
and the scheduler's exception report with its traceback."""

from __future__ import annotations

from kvforensics.model import OutOfMemory

# Frames of the scheduler process down to the allocator (paths of an SGLang install).
_FRAMES = (
    (
        "sglang/srt/managers/scheduler.py",
        3021,
        "run_scheduler_process",
        "scheduler.event_loop_pp_disagg_prefill()",
    ),
    ("torch/utils/_contextlib.py", 120, "decorate_context", "return func(*args, **kwargs)"),
    (
        "sglang/srt/disaggregation/prefill.py",
        688,
        "event_loop_pp_disagg_prefill",
        "batch = self.get_new_batch_prefill()",
    ),
    (
        "sglang/srt/managers/scheduler.py",
        1874,
        "get_new_batch_prefill",
        "ret = self._get_new_batch_prefill_raw(prefill_delayer_single_pass=None)",
    ),
    (
        "sglang/srt/managers/scheduler.py",
        2049,
        "_get_new_batch_prefill_raw",
        "new_batch.prepare_for_extend()",
    ),
    (
        "sglang/srt/managers/schedule_batch.py",
        1402,
        "prepare_for_extend",
        "out_cache_loc, req_pool_indices_tensor, req_pool_indices = alloc_for_extend(self)",
    ),
    (
        "sglang/srt/mem_cache/allocation.py",
        311,
        "alloc_for_extend",
        "out_cache_loc = alloc_paged_token_slots_extend(",
    ),
    (
        "sglang/srt/mem_cache/allocation.py",
        187,
        "alloc_paged_token_slots_extend",
        "raise RuntimeError(error_msg)",
    ),
)
_ROOT = "/usr/local/lib/python3.12/dist-packages/"


def tree_dump(rid: str, tokens_held: int, device_prefix: int, pool_size: int) -> list[str]:
    """A short ``tree_cache.pretty_print()``: root, the locked prefix of the request that
    failed, its computed part, and the size line. Token ids are not modelled: the first
    few are shown as placeholders."""
    ids = "[163584, 1009, 3327, 2, 48, 11, 9021, 7, 1316, 88]"
    lines = [" 1 [] r=1"]
    if device_prefix:
        lines.append(f"   {device_prefix} {ids} r=1")
    lines.append(f"     {tokens_held} {ids} r=1")
    lines.append(f"#tokens: {pool_size}")
    return lines


def oom_block(oom: OutOfMemory, stamp: str, tree: list[str]) -> list[str]:
    """Lines from the out-of-memory message to the end of the exception report; only the
    first line of each message carries ``stamp`` (the line prefix)."""
    msg = oom.message.splitlines()
    out = [stamp + msg[0], *msg[1:], *tree]
    out.append(stamp + "Scheduler hit an exception: Traceback (most recent call last):")
    for path, line, func, code in _FRAMES:
        full = _ROOT + path
        out.append(f'  File "{full}", line {line}, in {func}')
        out.append(f"    {code}")
    out.append(f"RuntimeError: {msg[0]}")
    out.extend(msg[1:])
    return out
