"""What every figure shares: the Agg canvas (matplotlib's object API, no pyplot: no global
backend, nothing opened on screen, safe from a library), the resolution, the palette and
the token axis. The report's figures and the fleet scan's both draw with it, so neither
stage imports the other for a colour."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from kvforensics.outputs import atomic_write

DPI = 110
#: thousands separators on a token axis
TOKENS = FuncFormatter(lambda v, _pos: f"{v:,.0f}")


@dataclass(frozen=True, slots=True)
class Palette:
    used: str = "#4c72b0"
    history: str = "#9aa5b1"
    load: str = "#c44e52"
    tail: str = "#dd8452"
    oom: str = "#c44e52"
    ok: str = "#55a868"


COLORS = Palette()


def save_png(fig: Figure, path: Path) -> Path:
    """``fig`` as a PNG at ``path``, written atomically."""
    FigureCanvasAgg(fig)
    atomic_write(path, lambda p: fig.savefig(p, format="png", dpi=DPI, bbox_inches="tight"))
    return path
