"""A world's run as the fork's scheduler logs: PP0 decides (startup lines, the adder's
check and result lines, HiCache load-backs, AttentionStore writes, the out-of-memory
block), PP1 replays PP0's plan, PP3 prints SGLang's ``Prefill batch`` lines."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from tests.ground.world import RoundRec, Settings, Step, World

ARGS_AT = datetime(2026, 11, 2, 9, 0, 12)
READY_AT = ARGS_AT + timedelta(seconds=209)
FIRST_ROUND_AT = READY_AT + timedelta(seconds=79)


def stamp(t: float, rank: str, with_ms: bool, at: datetime = FIRST_ROUND_AT) -> str:
    when = at + timedelta(seconds=t)
    if with_ms:
        ms = int(when.microsecond // 1000)
        return f"[{when:%Y-%m-%d %H:%M:%S}.{ms:03d} {rank}] "
    return f"[{when:%Y-%m-%d %H:%M:%S} {rank}] "


def startup(cfg: Settings, rank: str, with_ms: bool) -> list[str]:
    a = stamp(0, rank, with_ms, ARGS_AT)
    r = stamp(0, rank, with_ms, READY_AT)
    args = (
        "server_args=ServerArgs(model_path='/models/agent-xl', trust_remote_code=True, "
        f"dtype='auto', context_length=1048576, device='cuda', "
        f"chunked_prefill_size={cfg.chunk}, max_prefill_tokens={cfg.max_prefill}, "
        f"schedule_policy='fcfs', page_size={cfg.page}, tp_size=8, pp_size=4, dp_size=1, "
        "enable_hierarchical_cache=True, disable_radix_cache=False, "
        "disaggregation_mode='prefill', disaggregation_transfer_backend='mooncake')"
    )
    out = [
        a + args,
        a + "Load weight begin. avail mem=139.21 GB",
        r + f"max_total_num_tokens={cfg.pool}, chunked_prefill_size={cfg.chunk}, "
        f"max_prefill_tokens={cfg.max_prefill}, max_running_requests=256, "
        "context_len=1048576, available_gpu_mem=11.87 GB",
    ]
    if rank == "PP0" and cfg.align:
        out.append(r + f"Prefill checkpoint end align size: {cfg.align} (FlashKDA)")
    return out


def _check(s: Step) -> str:
    return (
        f"PrefillAdder.add_one_req: rid={s.rid}, seq_len={s.seq_len}, "
        f"prefix_len={s.device_prefix}, host_hit_len={s.host_hit}, "
        f"rem_chunk_tokens={s.rem_chunk}, local rem total: {s.baseline}, "
        f"current rem_total_tokens: {s.rem_total}, cur_rem_tokens: {s.cur_rem}"
    )


def _result(s: Step) -> str:
    extend = "" if s.decision == "rejected" else f", extend=[{s.start}, {s.end})"
    return (
        f"PrefillAdder.add_one_req result: rid={s.rid}, decision={s.decision}{extend}, "
        f"result={s.result}"
    )


def _adder(r: RoundRec, pre: str) -> list[str]:
    out = []
    for s in r.steps:
        if s.call != "add_one_req":
            continue  # a resumed chunk prints nothing
        out.append(pre + _check(s))
        if s.decision != "rejected" and s.host_hit:
            out.append(
                pre + f"HiCache load back: rid={s.rid}, host_hit_len={s.host_hit}, "
                f"loaded={s.host_hit}"
            )
        out.append(pre + _result(s))
    return out


def _oom_block(w: World, r: RoundRec, pre: str) -> list[str]:
    o = r.oom
    assert o is not None
    msg = [
        "Prefill out of memory. Try to lower your batch size.",
        f"Try to allocate {o.tokens} tokens.",
        f"Available full tokens: {o.available + o.evictable} "
        f"(full_available_size={o.available} + full_evictable_size_={o.evictable})",
    ]
    held = next((s for rid, s, _e, _n in r.pieces if rid == o.rid), 0)
    return [
        pre + msg[0],
        *msg[1:],
        " 1 [] r=1",
        f"   {held} [151643, 872, 1442, 25, 9707, 11, 358, 1079] r=1",
        f"#tokens: {w.cfg.pool}",
        pre + "Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", '
        "line 2049, in _get_new_batch_prefill_raw",
        "    new_batch.prepare_for_extend()",
        f"RuntimeError: {msg[0]}",
        *msg[1:],
    ]


def pp0(w: World, with_ms: bool, block: int) -> list[str]:
    out = startup(w.cfg, "PP0", with_ms)
    for r in w.records:
        pre = stamp(r.t_start, "PP0", with_ms)
        out += _adder(r, pre)
        if r.oom is not None:
            out += _oom_block(w, r, pre)
            break
        post = stamp(r.t_end, "PP0", with_ms)
        for rid, s, e, _new in r.pieces:
            if e // block > s // block:
                out.append(post + f"AttentionStore write: rid={rid}, blocks={e // block}, "
                           f"block_size={block}")  # fmt: skip
    return out


def pp1(w: World, with_ms: bool) -> list[str]:
    out = startup(w.cfg, "PP1", with_ms)
    for r in w.records:
        if r.pieces and r.oom is None:
            rids = ", ".join(p[0] for p in r.pieces)
            tokens = sum(e - s for _r, s, e, _n in r.pieces)
            out.append(
                stamp(r.t_start, "PP1", with_ms)
                + f"Replay planned admission: rids=[{rids}], extend_tokens={tokens}"
            )
    return out


def pp3(w: World, with_ms: bool) -> list[str]:
    out = startup(w.cfg, "PP3", with_ms)
    pool = w.cfg.pool
    for r in w.records:
        if not r.pieces or r.oom is not None:
            continue
        tokens = sum(e - s for _r, s, e, _n in r.pieces)
        dur = r.t_end - r.t_start
        usage = (pool - (r.available + r.evictable)) / pool
        out.append(
            stamp(r.t_end, "PP3", with_ms)
            + f"Prefill batch, #new-seq: {len(r.pieces)}, #new-token: {tokens}, "
            f"#cached-token: {r.cached_tokens}, token usage: {usage:.2f}, #running-req: 0, "
            f"#queue-req: {r.queue_len}, #prealloc-req: 0, #inflight-req: {r.inflight}, "
            f"input throughput (token/s): {tokens / dur if dur > 0 else 0.0:.2f}, "
            "cuda graph: False"
        )
    return out


def write_logs(w: World, out: Path, *, with_ms: bool) -> list[Path]:
    """pp0.log, pp1.log and pp3.log under ``out``; the AS block is the align size."""
    out.mkdir(parents=True, exist_ok=True)
    block = w.cfg.align or 256
    paths = []
    for name, lines in (
        ("pp0.log", pp0(w, with_ms, block)),
        ("pp1.log", pp1(w, with_ms)),
        ("pp3.log", pp3(w, with_ms)),
    ):
        p = out / name
        p.write_text("\n".join(lines) + "\n")
        paths.append(p)
    return paths
