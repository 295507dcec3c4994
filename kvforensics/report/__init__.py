"""Comparison and reporting: ledgers side by side, a round told step by step, and the
postmortem attachment (markdown, figures, ledgers).

Everything here takes `RunResult`s or ledger DataFrames, so a scenario run and a log
replay are reported the same way."""

from kvforensics.report.diff import Diff, Divergence, diff_ledgers
from kvforensics.report.explain import Explanation, explain_rid, explain_round
from kvforensics.report.ledgers import RoundSummary, ledger_of, round_summaries
from kvforensics.report.report import write_report

__all__ = [
    "Diff",
    "Divergence",
    "Explanation",
    "RoundSummary",
    "diff_ledgers",
    "explain_rid",
    "explain_round",
    "ledger_of",
    "round_summaries",
    "write_report",
]
