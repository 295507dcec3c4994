"""Causes of an out-of-memory: the message's pool arithmetic and the cause catalogue."""

from kvforensics.causes.arithmetic import Mechanism, OomArithmetic, PoolReading, classify

__all__ = ["Mechanism", "OomArithmetic", "PoolReading", "classify"]
