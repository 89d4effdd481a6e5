"""Bounded waits (standard library only): the one helper behind every polling loop of
the package, after distributed's ``Deadline``."""

from __future__ import annotations

import time
from collections.abc import Callable


class Deadline:
    """A moment on the monotonic clock that a wait must not pass."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    @property
    def expired(self) -> bool:
        return time.monotonic() >= self.end

    @property
    def remaining(self) -> float:
        return max(0.0, self.end - time.monotonic())


def wait_until(done: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Call ``done`` every ``interval`` seconds until it is true or ``timeout`` passed;
    whether it became true."""
    deadline = Deadline(timeout)
    while not done():
        if deadline.expired:
            return False
        time.sleep(min(interval, deadline.remaining) or interval)
    return True
