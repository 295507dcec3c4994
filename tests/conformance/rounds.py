"""Random prefill-node rounds as ``round_spec`` dicts (see ``sglang_ref.py``), and the
comparison of one round between SGLang 0.5.23's adder and the model.

The rounds cover: pages 1/16/64; free memory in whole pages and not (the allocator only
holds whole pages); evictable cache that covers the queued requests' evictable device
prefixes and more; queues of requests with page-aligned device prefixes (evictable or
held by someone else), host hits (mostly whole pages), prompts long enough to chunk; a
chunked request carried from an earlier round (any start: resumed pieces are not page
floored); chunk sizes and ``max_prefill_tokens`` that are page multiples and not;
``truncation_align_size`` off, a page multiple or not; ``max_new_tokens`` 1 or large
enough to hit the 4096 clip.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from . import releases
from .model_round import model_round
from .reference_client import SglangReference, diff_records


def _page_multiple_or_any(page: int, lo_pages: int, hi_pages: int, hi_any: int):
    return st.one_of(
        st.integers(lo_pages, hi_pages).map(lambda k: k * page),
        st.integers(max(1, lo_pages * page), hi_any),
    )


@st.composite
def round_specs(draw, *, max_queue: int = 5) -> dict:
    page = draw(st.sampled_from([1, 16, 64]))
    scale = draw(st.sampled_from([256, 1024, 4096, 16384]))  # typical prompt size
    chunk_hi = min(8192, 2 * scale)
    chunk = draw(_page_multiple_or_any(page, 1, max(1, chunk_hi // page), chunk_hi))
    max_prefill = draw(
        st.one_of(st.just(16384), _page_multiple_or_any(page, 1, max(1, 16384 // page), 16384))
    )
    tas = draw(
        st.one_of(
            st.none(),
            st.integers(1, 64).map(lambda k: k * page),
            st.integers(1, 4096),
            st.integers(1, max(1, chunk)),
        )
    )
    max_new = draw(st.one_of(st.just(1), st.integers(0, 8192)))

    chunked = None
    if draw(st.booleans()):
        seq = draw(st.integers(2, 4 * scale))
        start = draw(
            st.one_of(
                st.integers(1, (seq - 1) // page).map(lambda k: k * page)
                if seq - 1 >= page
                else st.just(1),
                st.integers(1, seq - 1),
            )
        )
        chunked = {"rid": "C", "seq_len": seq, "start": start}

    queue = []
    evictable_prefixes = 0
    demand = chunked["seq_len"] - chunked["start"] if chunked else 0
    for i in range(draw(st.integers(0 if chunked else 1, max_queue))):
        seq = draw(st.integers(1, 4 * scale))
        dev = page * draw(st.integers(0, (seq - 1) // page))
        if draw(st.booleans()):
            dev = 0
        room = seq - 1 - dev
        host = draw(
            st.one_of(
                st.just(0),
                st.integers(0, room // page).map(lambda k: k * page),
                st.integers(0, room),
            )
        )
        ev = draw(st.booleans()) if dev else True
        if ev:
            evictable_prefixes += dev
        demand += seq - dev + page + min(max_new, 4096)
        queue.append(
            {
                "rid": f"q{i}",
                "seq_len": seq,
                "device_prefix": dev,
                "host_hit": host,
                "prefix_evictable": ev,
            }
        )

    # Memory around what the round asks for: from far too little to plenty.
    hi = max(page, 2 * demand)
    free = draw(
        st.one_of(
            st.integers(0, hi // page).map(lambda k: k * page),
            st.integers(0, hi),
            st.integers(demand // page, hi // page).map(lambda k: k * page),
        )
    )
    other = page * draw(st.integers(0, hi // page // 2))
    return {
        "page_size": page,
        "chunked_prefill_size": chunk,
        "max_prefill_tokens": max_prefill,
        "max_new_tokens": max_new,
        "truncation_align_size": tas,
        "free": free,
        "evictable": evictable_prefixes + other,
        "chunked": chunked,
        "queue": queue,
    }


@dataclass(slots=True)
class Outcome:
    """One round compared: the differences (empty when equal), or out of domain."""

    diffs: list[str]
    out_of_domain: bool
    tags: set[str]
    decisions: int
    sglang_seconds: float
    model_seconds: float


def compare_round(ref: SglangReference, spec: dict, profile: str | None = None) -> Outcome:
    """One round through the reference's release and through the model with that
    release's profile (or ``profile``)."""
    expected = ref.run(spec)
    sglang_s = ref.last_seconds
    got = model_round(spec, profile or releases.profile_name(ref.release))
    diffs = [] if got.out_of_domain else diff_records(expected, got.records)
    tags = set() if got.out_of_domain else coverage_tags(spec, expected)
    return Outcome(diffs, got.out_of_domain, tags, len(expected), sglang_s, got.seconds)


def coverage_tags(spec: dict, records: list[dict]) -> set[str]:
    """What a compared round exercised, for the run's coverage table."""
    tags = {f"page {spec['page_size']}"}
    if spec.get("truncation_align_size"):
        tas = spec["truncation_align_size"]
        tags.add("truncation_align page multiple" if tas % spec["page_size"] == 0 else
                 "truncation_align not a page multiple")  # fmt: skip
    hosts = {q["rid"]: q["host_hit"] for q in spec["queue"]}
    truncations = 0
    for r in records:
        if r["call"] == "add_chunked_req":
            tags.add("resumed chunk")
            if r["end"] < spec["chunked"]["seq_len"]:
                tags.add("resumed chunk still unfinished")
            if r["rem_total_tokens"] <= 0:
                tags.add("resumed chunk leaves memory <= 0")
            continue
        tags.add(f"add_one_req {r['decision']} {r['result']}")
        if r["decision"] != "rejected" and hosts.get(r["rid"]):
            tags.add("host load-back" if r["load_back"] else "host load-back failed")
        truncations += r["decision"] == "truncated"
    if truncations > 1:
        tags.add("two truncations in one round")
    if spec["free"] % spec["page_size"]:
        tags.add("free not whole pages")
    if spec["max_new_tokens"] > 4096:
        tags.add("max_new_tokens clipped")
    return tags
