"""Wall-clock stamps for model times: SGLang's line prefix at 1-second resolution."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True)
class Clock:
    """Maps model seconds (``t``) to ``[YYYY-MM-DD HH:MM:SS RANK]`` prefixes from ``start``."""

    start: datetime

    @classmethod
    def at(cls, text: str) -> Clock:
        return cls(datetime.strptime(text, "%Y-%m-%d %H:%M:%S"))

    def wall(self, t: float) -> datetime:
        # 1e-9 absorbs float noise such as 2.9999999999 for a round that ends at 3 s
        return self.start + timedelta(seconds=math.floor(t + 1e-9))

    def prefix(self, t: float, rank: str) -> str:
        return f"[{self.wall(t):%Y-%m-%d %H:%M:%S} {rank}] "
