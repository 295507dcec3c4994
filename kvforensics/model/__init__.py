"""The admission model: a pure, deterministic model of a prefill node's PrefillAdder,
its page pool and its round loop, under named policies. No I/O."""

from kvforensics.model.adder import PrefillAdder
from kvforensics.model.budget import AddResult, Budget
from kvforensics.model.config import Config
from kvforensics.model.ledger import Ledger, Step
from kvforensics.model.node import (
    Inflight,
    NodeState,
    OutOfMemory,
    PrefillNode,
    RoundRecord,
    RunResult,
    Timing,
    start_node,
)
from kvforensics.model.policies import POLICIES, Policy, get_policy
from kvforensics.model.pool import PagePool, PoolOp, PrefillOutOfMemory
from kvforensics.model.profiles import PROFILES, Profile, get_profile
from kvforensics.model.request import Request

__all__ = [
    "POLICIES",
    "PROFILES",
    "AddResult",
    "Budget",
    "Config",
    "Inflight",
    "Ledger",
    "NodeState",
    "OutOfMemory",
    "PagePool",
    "Policy",
    "PoolOp",
    "PrefillAdder",
    "PrefillNode",
    "PrefillOutOfMemory",
    "Profile",
    "Request",
    "RoundRecord",
    "RunResult",
    "Step",
    "Timing",
    "get_policy",
    "get_profile",
    "start_node",
]
