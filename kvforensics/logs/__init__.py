"""Log-reading stage: SGLang scheduler log files -> one typed event per line of interest.

Public entry points:
    read_events(paths, extra_formats=None, progress=False) -> (pl.DataFrame, ParseSummary)
    iter_events(paths, summary, extra_formats=None, progress=False) -> Iterator[pl.DataFrame]
    load_catalogue(extra_formats=None) -> Catalogue
"""

from kvforensics.logs.catalogue import load_catalogue
from kvforensics.logs.forms import Catalogue, Format
from kvforensics.logs.reader import iter_events, read_events
from kvforensics.logs.summary import FileSummary, ParseSummary

__all__ = [
    "Catalogue",
    "FileSummary",
    "Format",
    "ParseSummary",
    "iter_events",
    "load_catalogue",
    "read_events",
]
