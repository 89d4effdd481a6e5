"""Snakemake's scheduling rounds (snakemake/scheduling/job_scheduler.py): one round for
every completion that arrived while the last one ran, and one more while a round's whole
subsample fits.

Snakemake 9.27.1's ``JobScheduler`` runs a scheduling round each time it acquires its
semaphore ``_open_jobs``, which is released once per finished job (``_proceed``), per
failed job, per executor error, for a graceful exit and by the job-rate limiter's timer.
A round first takes every completion reported so far (``_finish_jobs``, under the
scheduler's lock), then selects among the ready jobs. So when k completions arrive while a
round runs, the next round takes all k, and the k - 1 rounds after it find nothing new: each
still copies every ready job into a set, resets every ready job's resources, draws the
subsample and evaluates 500 jobs in the selector (0.5-1 ms of Snakemake's CPU per job at
10,000 thin rules, more as the ready jobs grow; docs/benchmarks.md). Here the semaphore is
replaced, for the plugin's runs only, by :class:`Rounds`, whose ``acquire`` takes every
release made so far: one round after a burst of completions, as the rounds Snakemake runs
after it would have found. Every release still leads to a round that starts after it (a
release is counted under the condition's lock, and the round reads the state its releaser
wrote before it released), so no completion, error or exit request waits for a later one.

The subsample (``--scheduler-subsample``, 500 when the plugin chooses it) caps what one
round can select, and a round only comes with a release: in 9.27.1, on a farm of more
free slots than the subsample, the first round starts 500 jobs and the rest of the
allocation waits for the first of them to finish (with minute-long jobs, minutes of idle
nodes). Here a round that selected every job of a full subsample and left slots free
(``_nodes``, ``_cores``) is followed by another at once; a round that selected less (the
resources bound it) is not, as in Snakemake. The rounds stop at the first round that
selects nothing or is not a full subsample's worth.

What this relies on: every use of ``_open_jobs`` (made in ``__init__``, acquired at the top
of ``schedule``'s loop, released elsewhere), the round's reading of the finished and failed
jobs after it acquires, the subsample and the call of the job selector in ``schedule``, and
``job_selector`` returning the selection after updating the free resources. Not installed on
another Snakemake; then Snakemake's rounds are as they are.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
from collections.abc import Callable
from typing import Any

from .guard import Touch, digest_texts, lines_naming, mark, source_of

#: How often a waiting round looks at the semaphore it replaced (a release that reached
#: the old object while the new one was put in place).
OLD_LOOK_SECONDS = 1.0
#: The resources whose free amount decides whether another round can start a job.
SLOTS = ("_nodes", "_cores")


class Rounds:
    """``JobScheduler._open_jobs``, coalescing: ``acquire`` takes every release so far."""

    __slots__ = ("_cond", "_old", "_pending", "acquired", "released")

    def __init__(self, old: Any = None) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._pending = 0
        self._old = old
        #: How many releases and rounds there were (for the tests and the benchmarks).
        self.released = 0
        self.acquired = 0

    def release(self, n: int = 1) -> None:
        with self._cond:
            self._pending += n
            self.released += n
            self._cond.notify()

    def _take_old(self) -> None:
        while self._old is not None and self._old.acquire(blocking=False):
            self._pending += 1
            self.released += 1

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Wait for a release (as ``threading.Semaphore.acquire``), then take them all."""
        end = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        with self._cond:
            self._take_old()
            while self._pending == 0:
                if not blocking:
                    return False
                wait = OLD_LOOK_SECONDS
                if end is not None:
                    wait = min(wait, end - time.monotonic())
                    if wait <= 0:
                        return False
                self._cond.wait(wait)
                self._take_old()
            self._pending = 0
            self.acquired += 1
            return True


def coalesce(scheduler: Any) -> Rounds:
    """Put a :class:`Rounds` in place of ``scheduler._open_jobs`` (once), keeping its
    releases so far. Called on the scheduling thread before a round acquires it."""
    current = scheduler._open_jobs
    if isinstance(current, Rounds):
        return current
    rounds = Rounds(old=current)
    with rounds._cond:
        rounds._take_old()
    scheduler._open_jobs = rounds
    return rounds


def refill_due(selected: Any, offered: Any, subsample: int | None, free: dict[str, Any]) -> bool:
    """Whether a round whose selector took ``selected`` of the ``offered`` jobs should be
    followed by another at once: it took a whole, full subsample, and slots are left."""
    return (
        bool(subsample)
        and len(offered) == subsample
        and len(selected) == len(offered)
        and all(free.get(name, 1) > 0 for name in SLOTS)
    )


def job_selector_replacement(job_selector: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(job_selector)
    def job_selector_refilling(self: Any, jobs: Any) -> Any:
        selected = job_selector(self, jobs)
        rounds = self._open_jobs
        if isinstance(rounds, Rounds) and refill_due(
            selected, jobs, self.subsample, self.resources
        ):
            rounds.release()
        return selected

    return mark(job_selector_refilling, job_selector)


def apply() -> None:
    from snakemake.scheduling.job_scheduler import JobScheduler

    JobScheduler.job_selector = job_selector_replacement(JobScheduler.job_selector)
    global _installed
    _installed = True


_installed = False


def installed() -> bool:
    """Whether this process's Snakemake runs the plugin's rounds (:func:`apply` ran)."""
    return _installed


def relied_on(cls_source: str, schedule: str, job_selector: str) -> list[str]:
    """Of ``JobScheduler``'s source: every line naming ``_open_jobs`` (made, acquired once,
    released), what a round reads after it acquires, the subsample and the selector's call
    in ``schedule``, and ``job_selector``'s signature, its update of the free resources and
    its returns."""
    after_acquire = ("_finish_jobs()", "_error_jobs()", "needrun = set(")
    return [
        *lines_naming(cls_source, "_open_jobs"),
        *(line for name in after_acquire for line in lines_naming(schedule, name)),
        *lines_naming(schedule, "subsample"),
        *lines_naming(schedule, "self.job_selector("),
        job_selector.splitlines()[0].strip(),
        *lines_naming(job_selector, "update_available_resources"),
        *lines_naming(job_selector, "return"),
    ]


def found() -> str | None:
    """The narrowed fingerprint of the running Snakemake (None: unreadable)."""
    from snakemake.scheduling.job_scheduler import JobScheduler

    try:
        cls_source = inspect.getsource(JobScheduler)
        texts = relied_on(
            cls_source, source_of(JobScheduler.schedule), source_of(JobScheduler.job_selector)
        )
    except (OSError, TypeError):
        return None
    return digest_texts(texts)


ROUNDS = Touch(
    name="scheduling rounds",
    kind="fix",
    what="JobScheduler's rounds: _open_jobs, schedule, job_selector (job_scheduler.py)",
    written_for="9.27.1",
    without=(
        "one scheduling round per completion, each over every ready job, and no more than "
        "--scheduler-subsample jobs started until the first one ends"
    ),
    found=found,
    #: the lines :func:`relied_on` picks
    fingerprint="16248abc1abc6bbb6708cff78455326fdb5bbd827a9244b66a1642e63a8402ef",
    apply=apply,
)
TOUCHES = (ROUNDS,)
