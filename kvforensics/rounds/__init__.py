"""Rounds stage: events of the deciding rank -> scheduling rounds with provenance."""

from kvforensics.rounds.config import read_config
from kvforensics.rounds.crosscheck import cross_check
from kvforensics.rounds.provenance import Prov
from kvforensics.rounds.rebuild import Rebuild, Rebuilder, rebuild_rounds
from kvforensics.rounds.records import Decision, Piece, Round
from kvforensics.rounds.segment import Segmenter
from kvforensics.rounds.source import LogRounds, from_logs

__all__ = [
    "Decision",
    "LogRounds",
    "Piece",
    "Prov",
    "Rebuild",
    "Rebuilder",
    "Round",
    "Segmenter",
    "cross_check",
    "from_logs",
    "read_config",
    "rebuild_rounds",
]
