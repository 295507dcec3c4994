"""The adder's words in a ledger: what each call decided, which call it was, and what it
returned. ``StrEnum`` members equal the strings the ledgers have always held, so JSON,
Parquet and CSV keep the same values and a member compares equal to a string read back
from a ledger file."""

from __future__ import annotations

from enum import StrEnum


class Decision(StrEnum):
    """A step's ``decision`` column."""

    FULL = "full"  # add_one_req admitted the whole request
    TRUNCATED = "truncated"  # add_one_req admitted a first piece; a tail is left
    RESUMED = "resumed"  # add_chunked_req computed the next piece
    REJECTED = "rejected"  # add_one_req refused it
    PARKED = "parked"  # add_chunked_req left it out of the round (waits for memory)


class Call(StrEnum):
    """A step's ``call`` column."""

    ADD_ONE_REQ = "add_one_req"
    ADD_CHUNKED_REQ = "add_chunked_req"
    ALLOCATE = "allocate"


class BudgetState(StrEnum):
    """A step's ``budget_state`` column: what the call returned (``OOM`` on a failed
    allocation)."""

    CONTINUE = "CONTINUE"
    NO_TOKEN = "NO_TOKEN"
    OTHER = "OTHER"
    OOM = "OOM"


#: the decisions that compute a piece in the round
ADMITTED = (Decision.FULL, Decision.TRUNCATED, Decision.RESUMED)
#: the decisions that let a new request in (``add_one_req``)
ENTERED = (Decision.FULL, Decision.TRUNCATED)
#: the decisions that may leave a tail for later rounds
CHUNKED = (Decision.TRUNCATED, Decision.RESUMED)
#: the adder's own calls (an ``allocate`` step is the batch's allocation)
ADDER_CALLS = (Call.ADD_CHUNKED_REQ, Call.ADD_ONE_REQ)
