"""Replay stage: rebuilt rounds re-run under each policy, checked against the log."""

from kvforensics.replay.replay import (
    EXIT_INPUT,
    EXIT_MISMATCH,
    EXIT_NOT_REPRODUCED,
    EXIT_OK,
    ReplayOptions,
    ReplayResult,
    replay_logs,
)
from kvforensics.replay.verdict import root_cause, verdict_text

__all__ = [
    "EXIT_INPUT",
    "EXIT_MISMATCH",
    "EXIT_NOT_REPRODUCED",
    "EXIT_OK",
    "ReplayOptions",
    "ReplayResult",
    "replay_logs",
    "root_cause",
    "verdict_text",
]
