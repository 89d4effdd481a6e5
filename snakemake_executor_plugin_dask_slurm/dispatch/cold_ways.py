"""How many general-way jobs went the cold way (a fresh Snakemake each), and why: the one
line the run ends with when any did. A :class:`.listeners.JobListener` (thread-safe)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

from ..worker.wire import WHY_TEXT, Cold, Why
from .listeners import JobListener
from .outcomes import Finished
from .registry import JobRecord

#: Reasons named in the line; the rest are summed up.
SHOWN = 5


class ColdWays(JobListener):
    """Counts by named reason (:class:`..worker.wire.Why`), keeping the first case's
    detail of each as its example: a reason whose detail names a pid or a path stays one
    line."""

    def __init__(self, say: Callable[[str], None] = lambda line: None) -> None:
        self._counts: Counter[Why] = Counter()
        self._example: dict[Why, str] = {}
        self._lock = threading.Lock()
        self._say = say

    def ended(self, record: JobRecord, finished: Finished) -> None:
        if finished.cold is not None:
            self.add(finished.cold)

    def run_ended(self, command: str) -> None:
        line = self.line()
        if line:
            self._say(line)

    def add(self, cold: Cold) -> None:
        with self._lock:
            self._counts[cold.why] += 1
            if cold.detail:
                self._example.setdefault(cold.why, cold.detail)

    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def line(self) -> str | None:
        """``N jobs went the cold way: 3 because ... (e.g. ...), 1 because ...`` (None:
        none did)."""
        with self._lock:
            ranked = self._counts.most_common()
            examples = dict(self._example)
        if not ranked:
            return None
        total = sum(n for _, n in ranked)
        parts = [f"{n} because {_reason(why, examples.get(why), n)}" for why, n in ranked[:SHOWN]]
        rest = sum(n for _, n in ranked[SHOWN:])
        if rest:
            parts.append(f"{rest} for {len(ranked) - SHOWN} other reason(s)")
        jobs = "1 job" if total == 1 else f"{total} jobs"
        return f"{jobs} went the cold way (a fresh Snakemake each): {'; '.join(parts)}"


def _reason(why: Why, example: str | None, count: int) -> str:
    """The reason's sentence, with its example detail (one of ``count``)."""
    if not example:
        return WHY_TEXT[why]
    return f"{WHY_TEXT[why]} ({'e.g. ' if count > 1 else ''}{example})"
