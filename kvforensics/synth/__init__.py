"""Synthetic scheduler logs: model runs rendered as the lines SGLang and the incident's
fork print, one writer per PP rank role (PP0 decides, PP1 replays, PP3 reports batches).

Used to build test fixtures; nothing here is needed to read real logs.
"""

from kvforensics.synth.capture import Capture, RoundCapture, capture_run
from kvforensics.synth.clock import Clock
from kvforensics.synth.ranks import pp0_lines, pp1_lines, pp3_lines
from kvforensics.synth.sink import write_log
from kvforensics.synth.startup import Startup, startup_lines

__all__ = [
    "Capture",
    "Clock",
    "RoundCapture",
    "Startup",
    "capture_run",
    "pp0_lines",
    "pp1_lines",
    "pp3_lines",
    "startup_lines",
    "write_log",
]
