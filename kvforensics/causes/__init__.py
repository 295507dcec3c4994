"""Causes of an out-of-memory: the message's pool arithmetic and the cause catalogue."""

from kvforensics.causes.arithmetic import Mechanism, OomArithmetic, PoolReading, classify
from kvforensics.causes.catalogue import IDS, find_causes, in_order
from kvforensics.causes.cause import Cause, Figures
from kvforensics.causes.oom import OomFigures, oom_words
from kvforensics.causes.tail import RootCause

__all__ = [
    "IDS",
    "Cause",
    "Figures",
    "Mechanism",
    "OomArithmetic",
    "OomFigures",
    "PoolReading",
    "RootCause",
    "classify",
    "find_causes",
    "in_order",
    "oom_words",
]
