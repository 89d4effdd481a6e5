"""Waking Snakemake's status loop from any thread (Dask's event thread when a task ends,
the recovery thread, shutdown), so that an ended job is told to Snakemake at once rather
than at the loop's next interval."""

from __future__ import annotations

import asyncio
import contextlib


class Wakeup:
    """An asyncio event of the status loop's own event loop (made on its first wait),
    set thread-safely."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None

    def set(self) -> None:
        loop, event = self._loop, self._event
        if loop is not None and event is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed meanwhile: nobody to wake
                loop.call_soon_threadsafe(event.set)

    async def wait(self, timeout: float) -> None:
        """Until set, or ``timeout`` seconds."""
        if self._event is None:
            self._event = asyncio.Event()
            self._loop = asyncio.get_running_loop()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), timeout)
        self._event.clear()
