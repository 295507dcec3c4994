"""Rounds stage: events of the deciding rank -> scheduling rounds with provenance."""

from kvforensics.rounds.config import read_config
from kvforensics.rounds.crosscheck import cross_check
from kvforensics.rounds.provenance import Prov
from kvforensics.rounds.rebuild import Decision, Piece, Rebuild, Round, rebuild_rounds

__all__ = [
    "Decision",
    "Piece",
    "Prov",
    "Rebuild",
    "Round",
    "cross_check",
    "read_config",
    "rebuild_rounds",
]
