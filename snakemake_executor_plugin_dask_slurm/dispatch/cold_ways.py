"""How many general-way jobs went the cold way (a fresh Snakemake each), and why: the one
line the run ends with when any did. A :class:`.listeners.JobListener` (thread-safe)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

from .listeners import JobListener
from .outcomes import Finished
from .registry import JobRecord

#: Reasons named in the line; the rest are summed up.
SHOWN = 5


class ColdWays(JobListener):
    def __init__(self, say: Callable[[str], None] = lambda line: None) -> None:
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._say = say

    def ended(self, record: JobRecord, finished: Finished) -> None:
        if finished.cold is not None:
            self.add(finished.cold)

    def run_ended(self, command: str) -> None:
        line = self.line()
        if line:
            self._say(line)

    def add(self, reason: str) -> None:
        with self._lock:
            self._counts[reason] += 1

    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def line(self) -> str | None:
        """``N jobs went the cold way: 3 because ..., 1 because ...`` (None: none did)."""
        with self._lock:
            ranked = self._counts.most_common()
        if not ranked:
            return None
        total = sum(n for _, n in ranked)
        parts = [f"{n} because {reason}" for reason, n in ranked[:SHOWN]]
        rest = sum(n for _, n in ranked[SHOWN:])
        if rest:
            parts.append(f"{rest} for {len(ranked) - SHOWN} other reason(s)")
        jobs = "1 job" if total == 1 else f"{total} jobs"
        return f"{jobs} went the cold way (a fresh Snakemake each): {'; '.join(parts)}"
