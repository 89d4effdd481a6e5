"""The tests' one bounded wait (as the package's is worker/waiting.py): poll until something
holds, fail the test with what did not happen, and stop early when a check says the wait
is pointless (e.g. the process under test exited)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def eventually(
    what: str,
    ready: Callable[[], T],
    timeout: float,
    interval: float = 0.05,
    check: Callable[[], object] | None = None,
) -> T:
    """``ready()``'s first true value, asked every ``interval`` seconds; an AssertionError
    saying ``what`` did not happen within ``timeout`` s. ``check`` runs before each look (it
    may assert, e.g. that the process under test still runs)."""
    deadline = time.monotonic() + timeout
    while True:
        if check is not None:
            check()
        value = ready()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s")
        time.sleep(interval)


def still_running(proc: Any, output: Callable[[], str] = lambda: "") -> Callable[[], None]:
    """A ``check`` for :func:`eventually`: the process under test has not exited (else the
    wait is pointless; the failure shows ``output()``)."""

    def check() -> None:
        assert proc.poll() is None, f"it exited with code {proc.returncode}:\n{output()}"

    return check
