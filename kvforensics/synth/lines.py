"""Message texts (no prefix) of the lines the writers emit, in the wording that
docs/log-formats.md describes."""

from __future__ import annotations

from kvforensics.model.ledger import Step


def adder_check(s: Step, rid: str) -> str:
    return (
        f"PrefillAdder.add_one_req: rid={rid}, seq_len={s.seq_len}, "
        f"prefix_len={s.device_prefix}, host_hit_len={s.host_hit}, "
        f"rem_chunk_tokens={s.rem_chunk_tokens}, local rem total: {s.baseline}, "
        f"current rem_total_tokens: {s.rem_total_tokens}, cur_rem_tokens: {s.cur_rem_tokens}"
    )


def adder_result(s: Step, rid: str) -> str:
    extend = "" if s.decision == "rejected" else f", extend=[{s.start}, {s.end})"
    return (
        f"PrefillAdder.add_one_req result: rid={rid}, decision={s.decision}{extend}, "
        f"result={s.budget_state}"
    )


def load_back(rid: str, host_hit: int, loaded: int) -> str:
    return f"HiCache load back: rid={rid}, host_hit_len={host_hit}, loaded={loaded}"


def as_write(rid: str, blocks: int, block_size: int) -> str:
    return f"AttentionStore write: rid={rid}, blocks={blocks}, block_size={block_size}"


def as_blocks(start: int, end: int, block_size: int) -> int | None:
    """Whole AS blocks after computing [start, end), or None when no block completed."""
    if end // block_size > start // block_size:
        return end // block_size
    return None


def replay_plan(rids: list[str], extend_tokens: int) -> str:
    return f"Replay planned admission: rids=[{', '.join(rids)}], extend_tokens={extend_tokens}"


def prefill_batch(
    *,
    new_seq: int,
    new_token: int,
    cached_token: int,
    token_usage: float,
    queue_req: int,
    inflight_req: int,
    throughput: float,
) -> str:
    return (
        f"Prefill batch, #new-seq: {new_seq}, #new-token: {new_token}, "
        f"#cached-token: {cached_token}, token usage: {token_usage:.2f}, #running-req: 0, "
        f"#queue-req: {queue_req}, #prealloc-req: 0, #inflight-req: {inflight_req}, "
        f"input throughput (token/s): {throughput:.2f}, cuda graph: False"
    )
