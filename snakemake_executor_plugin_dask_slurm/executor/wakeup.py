"""Waking Snakemake's status loop from any thread (Dask's event thread when a task ends,
the recovery thread, shutdown), so that an ended job is told to Snakemake at once rather
than at the loop's next interval; and, while jobs end faster than that, in rounds at most
a few hundredths of a second apart."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable


class Wakeup:
    """An asyncio event of the status loop's own event loop (made on its first wait),
    set thread-safely.

    A burst of sets (Dask delivers many jobs' ends in one message, each one a set) sends
    the loop one wake-up, not one each: a set while a wake-up is already on its way to
    the loop (queued, not yet run) adds nothing, because that wake-up runs after it.
    Each wake-up otherwise costs a write to the loop's self-pipe on the setting thread
    and a read and a callback on the loop's.

    ``settle``: a wait that would return less than ``settle`` seconds after the last one
    returned waits until that much time has passed (the sets meanwhile are its own), so
    that a stream of completions reaches Snakemake in rounds of several. Each status round
    wakes Snakemake's main thread for a scheduling round of its own (its selection, its log
    lines), which costs about as much as a job's other bookkeeping: in a farm of thin jobs
    the rounds came one or two jobs apart (docs/benchmarks.md, "Completions told in rounds").
    A set after a quiet spell of ``settle`` is answered at once, and so is every set while
    ``worth_it()`` is false (few jobs in flight: the rounds could not hold several, and
    a job's slot would wait on the settling). :meth:`hurry` makes every later wait answer
    at once (the run is ending)."""

    def __init__(self, settle: float = 0.0, worth_it: Callable[[], bool] = lambda: True) -> None:
        self.settle = settle
        self.worth_it = worth_it
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None
        #: A wake-up is queued on the loop and has not run yet. Set and read without a
        #: lock: a race makes two wake-ups (harmless), never none, since the wake-up
        #: clears it before it sets the event.
        self._queued = False
        self._returned = -math.inf  # time.monotonic() of the last wait's return
        self._hurry = False

    def set(self) -> None:
        loop, event = self._loop, self._event
        if loop is None or event is None or self._queued or loop.is_closed():
            return
        self._queued = True
        try:
            loop.call_soon_threadsafe(self._wake, event)
        except RuntimeError:  # closed meanwhile: nobody to wake
            self._queued = False

    def _wake(self, event: asyncio.Event) -> None:
        self._queued = False
        event.set()

    def hurry(self) -> None:
        """Wake the loop, and let no wait from now on settle."""
        self._hurry = True
        self.set()

    async def wait(self, timeout: float) -> None:
        """Until set, or ``timeout`` seconds; then until ``settle`` seconds after the last
        wait returned."""
        if self._event is None:
            self._event = asyncio.Event()
            self._loop = asyncio.get_running_loop()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), timeout)
        left = self._returned + self.settle - time.monotonic()
        if left > 0 and not self._hurry and self.worth_it():
            await asyncio.sleep(left)
        # Cleared after the settling: a set before here is answered by the round that
        # follows this wait (it drains after it), a set after it by the next wait.
        self._event.clear()
        self._returned = time.monotonic()
