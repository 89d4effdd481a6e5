"""The run's signal handlers, in one place (as submitit's ``JobEnvironment`` keeps its own):
SIGTERM (SLURM's time limit, scancel, a user's kill) and SIGUSR1 (land the run now, e.g.
``sbatch --signal=B:USR1@300``).

Python runs a signal handler on the main thread, between two bytecodes, possibly while
that thread holds Snakemake's scheduler lock. So a handler here only sets an event or
calls something that only sets one; the work runs on a thread of its own. Handlers are
installed only from the main thread (Python allows no other), i.e. not when Snakemake
runs from an API call on another thread.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable


def on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def on_sigterm(work: Callable[[Callable[[], None]], None]) -> None:
    """On SIGTERM, run ``work`` on a thread of its own. ``work`` gets a function that calls
    the handler installed before this one (Snakemake's own: schedule nothing more), for
    it to call when it sees fit.

    Installed lazily (at the first scheduling round), because Snakemake installs its own
    handler after it created the executor."""
    if not on_main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)
    event = threading.Event()

    def call_previous() -> None:
        if callable(previous):
            previous(signal.SIGTERM, None)

    def watch() -> None:
        event.wait()
        work(call_previous)

    threading.Thread(target=watch, name="dask-slurm-sigterm", daemon=True).start()
    signal.signal(signal.SIGTERM, lambda signum, frame: event.set())


def on_sigusr1(request: Callable[[str], None]) -> None:
    """On SIGUSR1, ``request`` (it must only set an event) with the reason."""
    if on_main_thread():
        signal.signal(signal.SIGUSR1, lambda signum, frame: request("SIGUSR1 received"))
