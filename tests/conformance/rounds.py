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
    chunk = draw(_page_multiple_or_any(page, 1, max(1, 8192 // page), 8192))
    max_prefill = draw(
        st.one_of(st.just(16384), _page_multiple_or_any(page, 1, max(1, 16384 // page), 16384))
    )
    tas = draw(
        st.one_of(
            st.none(),
            st.integers(1, 64).map(lambda k: k * page),
            st.integers(1, 4096),
        )
    )
    max_new = draw(st.one_of(st.just(1), st.integers(0, 8192)))

    queue = []
    evictable_prefixes = 0
    for i in range(draw(st.integers(0, max_queue))):
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
        queue.append(
            {
                "rid": f"q{i}",
                "seq_len": seq,
                "device_prefix": dev,
                "host_hit": host,
                "prefix_evictable": ev,
            }
        )

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

    free = draw(
        st.one_of(
            st.integers(0, 6 * scale // page).map(lambda k: k * page),
            st.integers(0, 6 * scale),
        )
    )
    other = page * draw(st.integers(0, 4 * scale // page))
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
    decisions: int
    sglang_seconds: float
    model_seconds: float


def compare_round(ref: SglangReference, spec: dict) -> Outcome:
    expected = ref.run(spec)
    sglang_s = ref.last_seconds
    got = model_round(spec)
    diffs = [] if got.out_of_domain else diff_records(expected, got.records)
    return Outcome(diffs, got.out_of_domain, len(expected), sglang_s, got.seconds)
