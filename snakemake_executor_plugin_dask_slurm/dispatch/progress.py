"""The run's progress, from what it counts anyway: a listener that adds to a few integers
per ended job (:class:`ProgressCounts`, O(1), no lock: one writer per counter, read by
the status thread as they are), Snakemake's own done and total, the registry's jobs in
flight and the scheduler's load, asked once per status round, not per job
(:func:`scheduler_load`). :func:`figures` turns one round's readings into the status
file's figures (pure)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .listeners import JobListener
from .outcomes import Finished
from .registry import JobRecord


class ProgressCounts(JobListener):
    """How many tasks ended, by how: the rest of the progress is read elsewhere."""

    def __init__(self, stopping: Callable[[], bool] = lambda: False) -> None:
        #: Whether the run is stopping (Ctrl-C, SIGTERM, a failure): what ends then was
        #: stopped, not failed.
        self._stopping = stopping
        self.succeeded = 0
        self.failed = 0
        self.lost = 0
        self.stopped = 0

    def ended(self, record: JobRecord, finished: Finished) -> None:
        if finished.ok:
            self.succeeded += 1
        elif finished.lost_on is not None:
            self.lost += 1
        elif finished.too_late:  # moved, not failed: it runs elsewhere
            pass
        elif self._stopping():
            self.stopped += 1
        else:
            self.failed += 1


@dataclass(frozen=True)
class Load:
    """The scheduler's view of the workers: how many, their threads, their tasks."""

    workers: int
    slots: int
    running: int


def _scheduler_load(dask_scheduler: Any) -> tuple[int, int, list[str]]:
    workers = dask_scheduler.workers.values()
    return (
        len(dask_scheduler.workers),
        sum(ws.nthreads for ws in workers),
        [str(ts.key) for ws in workers for ts in ws.processing],
    )


def scheduler_load(
    client: Any, jobs_of: Callable[[Sequence[str]], Sequence[str]] = list
) -> Load | None:
    """One call to the scheduler, O(tasks on workers) there (None if it does not answer).
    ``jobs_of``: the jobs of those tasks (a batch's still running: :mod:`.batching`)."""
    try:
        workers, slots, keys = client.run_on_scheduler(_scheduler_load)
    except Exception:  # a status round never fails the run: the figures say "?"
        return None
    return Load(workers, slots, len(jobs_of(keys)))


@dataclass(frozen=True)
class Reading:
    """One status round's readings."""

    at: float
    done: int | None
    total: int | None
    in_flight: int
    load: Load | None
    #: Worker jobs running (None: the farm does not grow with worker jobs).
    worker_jobs: int | None = None


def figures(
    now: Reading, before: Reading | None, counts: ProgressCounts, landing_at: float | None
) -> dict[str, Any]:
    """The status file's progress figures from two successive readings (the rate is over
    the time between them)."""
    load = now.load
    # Dask hands a worker more tasks than it has threads (they wait there): at most the
    # threads run. A job of several threads fills one slot here, so the share is a floor.
    running = min(now.in_flight, load.running, load.slots) if load is not None else None
    waiting = None
    if now.total is not None and now.done is not None:
        waiting = max(0, now.total - now.done - (running or 0) - counts.failed)
    rate = None
    if before is not None and now.done is not None and before.done is not None:
        span = now.at - before.at
        rate = (now.done - before.done) / span * 60 if span > 0 else None
    eta = None
    if rate and now.total is not None and now.done is not None:
        eta = max(0.0, (now.total - now.done) / rate * 60)
    return {
        "jobs": {
            "done": now.done, "total": now.total, "running": running, "waiting": waiting,
            "in_flight": now.in_flight, "succeeded": counts.succeeded,
            "failed": counts.failed, "lost": counts.lost, "stopped": counts.stopped,
        },
        "rate_per_minute": rate,
        "eta_seconds": eta,
        "fits_before_landing": None if eta is None or landing_at is None
        else now.at + eta <= landing_at,
        "landing_at": landing_at,
        "workers": {
            "alive": load.workers if load else None,
            "slots": load.slots if load else None,
            "busy_share": (running or 0) / load.slots if load and load.slots else None,
            "worker_jobs": now.worker_jobs,
        },
    }  # fmt: skip
