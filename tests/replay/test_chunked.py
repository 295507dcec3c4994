"""The rebuild's chunked request: a frozen record that holds what it promises."""

import dataclasses

import pytest

from kvforensics.rounds.rebuild import Chunked, Pending


def test_chunked_is_frozen_and_never_negative() -> None:
    c = Chunked("r1", 4096, 2048)
    assert (c.rid, c.seq_len, c.done) == ("r1", 4096, 2048)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.done = 3000  # type: ignore[misc]
    with pytest.raises(AssertionError):
        Chunked("r1", 4096, -1)


def test_pending_holds_the_chunk_and_its_baseline() -> None:
    p = Pending(Chunked("r1", 4096, 2048), None)
    assert p.chunked.done == 2048 and p.base_end is None
