"""Causes of an out-of-memory: the message's pool arithmetic and the cause catalogue."""

from kvforensics.causes.arithmetic import Mechanism, OomArithmetic, PoolReading, classify
from kvforensics.causes.catalogue import IDS, find_causes, in_order
from kvforensics.causes.cause import Cause

__all__ = [
    "IDS",
    "Cause",
    "Mechanism",
    "OomArithmetic",
    "PoolReading",
    "classify",
    "find_causes",
    "in_order",
]
