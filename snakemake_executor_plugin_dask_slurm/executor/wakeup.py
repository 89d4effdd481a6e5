"""Waking Snakemake's status loop from any thread (Dask's event thread when a task ends,
the recovery thread, shutdown), so that an ended job is told to Snakemake at once rather
than at the loop's next interval."""

from __future__ import annotations

import asyncio
import contextlib


class Wakeup:
    """An asyncio event of the status loop's own event loop (made on its first wait),
    set thread-safely.

    A burst of sets (Dask delivers many jobs' ends in one message, each one a set) sends
    the loop one wake-up, not one each: a set while a wake-up is already on its way to
    the loop (queued, not yet run) adds nothing, because that wake-up runs after it.
    Each wake-up otherwise costs a write to the loop's self-pipe on the setting thread
    and a read and a callback on the loop's."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None
        #: A wake-up is queued on the loop and has not run yet. Set and read without a
        #: lock: a race makes two wake-ups (harmless), never none, since the wake-up
        #: clears it before it sets the event.
        self._queued = False

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

    async def wait(self, timeout: float) -> None:
        """Until set, or ``timeout`` seconds."""
        if self._event is None:
            self._event = asyncio.Event()
            self._loop = asyncio.get_running_loop()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), timeout)
        self._event.clear()
