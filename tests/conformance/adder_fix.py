"""A pytest plugin for the reference venv (``-p adder_fix``, with this folder on
PYTHONPATH): it makes SGLang importable on this CPU-only machine (``_release``: the import
stand-ins and shims the reference driver uses), and with ``KVF_ADDER_FIX=tail`` patches
the postmortem's fix into SGLang 0.5.23's ``PrefillAdder``: the unscheduled tail of a
truncated request (its pages and its first token) is charged to
``rem_total_token_offset`` (``PrefillBudget.total_offset``) on both truncation paths, a
newly truncated waiting request and a resumed chunk that is still truncated.

``kvforensics reproduce``'s emitted tests run under it twice (test_reproduce.py): without
the switch they must fail, with it they must pass.
"""

from __future__ import annotations

import os

import _release  # noqa: F401  (import stand-ins and shims before SGLang loads)
from sglang.srt.managers.schedule_policy import CLIP_MAX_NEW_TOKENS, PrefillAdder

SWITCH = "KVF_ADDER_FIX"


def _reserve_tail(adder: PrefillAdder, req) -> None:
    tail = len(req.full_untruncated_fill_ids) - req.extend_end
    if tail > 0:
        first = min(req.sampling_params.max_new_tokens, CLIP_MAX_NEW_TOKENS)
        adder.memory_budget.total_offset += adder.ceil_paged_tokens(tail) + first


def _install() -> None:
    commit, resume = PrefillAdder._commit_prefill_admission, PrefillAdder.add_chunked_req

    def commit_reserving(self, req, admission, mamba_gap_reserve):
        commit(self, req, admission, mamba_gap_reserve)
        if admission.is_chunked:  # add_one_req returns budget_state() after this
            _reserve_tail(self, req)

    def resume_reserving(self, req):
        out = resume(self, req)
        if out is not None and req in self.can_run_list:  # resumed and still truncated
            _reserve_tail(self, req)
        return out

    PrefillAdder._commit_prefill_admission = commit_reserving
    PrefillAdder.add_chunked_req = resume_reserving


if os.environ.get(SWITCH) == "tail":
    _install()
elif os.environ.get(SWITCH):
    raise RuntimeError(f"{SWITCH}={os.environ[SWITCH]!r}: the only fix here is 'tail'")
