"""Does the model describe the code that ran? Each logged round re-run under ``prefix``."""

from __future__ import annotations

from kvforensics.model.profiles import FORK, Profile
from kvforensics.rounds import Rebuild

#: logged field -> ledger column
FIELDS = {
    "decision": "decision",
    "start": "start",
    "end": "end",
    "result": "budget_state",
    "baseline": "baseline",
    "rem_total_tokens": "rem_total_tokens",
    "cur_rem_tokens": "cur_rem_tokens",
    "rem_chunk_tokens": "rem_chunk_tokens",
}


def check_fidelity(rb: Rebuild, policy: str = "prefix", profile: Profile = FORK) -> dict:
    from kvforensics.replay.state import node_at

    mismatches = []
    checked = 0
    for rnd in rb.rounds:
        if not rnd.decisions:
            continue
        checked += 1
        node = node_at(rb, rnd, policy, profile=profile)
        node.step()
        rows = [r for r in node.ledger.rows if r.call == "add_one_req"]
        if len(rows) != len(rnd.decisions):
            mismatches.append(
                {
                    "round": rnd.index,
                    "rid": None,
                    "field": "steps",
                    "logged": len(rnd.decisions),
                    "model": len(rows),
                }
            )
        for d, row in zip(rnd.decisions, rows, strict=False):
            for logged, col in FIELDS.items():
                want, got = getattr(d, logged), getattr(row, col)
                if logged in ("start", "end") and d.decision == "rejected":
                    continue
                if want is None and logged in ("decision", "start", "end", "result"):
                    continue  # the result line was never written (the log is cut there)
                if want != got:
                    mismatches.append(
                        {
                            "round": rnd.index,
                            "rid": d.rid,
                            "field": logged,
                            "logged": want,
                            "model": got,
                            "where": d.where,
                        }
                    )
    return {"rounds_checked": checked, "mismatches": mismatches}
