"""When to grow the farm with worker jobs, and when to shrink it (pure).

The policy HyperQueue's automatic allocation taught, decided anew at every tick from what
is true now, so that nothing oscillates:

- **Backlog**: the CPUs asked for by the jobs handed to Dask that no worker runs yet (what
  Snakemake hands over is what it holds ready, up to ``--jobs``). Only a backlog that has
  lasted ``grow_after`` seconds submits anything: a workflow whose jobs all fit in a few
  seconds on the workers it has never waits for a batch queue.
- **Capacity to come counts**: a pending worker job will bring its CPUs, so a backlog
  already covered by pending jobs submits nothing more. A queue that starts nothing for
  minutes therefore never causes a storm of submissions.
- **At most** ``max_jobs`` worker jobs at once, pending and running together.
- **Failures back off**: a failed submission waits ``BACKOFF_SECONDS * 2**(n-1)`` (at most
  ``BACKOFF_MAX``) before the next; after ``MAX_FAILURES`` in a row, growth pauses for the
  rest of the run (the run goes on with what it has).
- **Shrink**: once nothing has waited for ``idle_seconds``, pending jobs are cancelled
  and a running job whose workers have all been idle that long is retired.
- **Replaced in time**: a running job with a time limit lands before it
  (:mod:`.pool`); while it still has work (its workers are busy, or jobs wait), its
  *successor* is submitted early enough to be running before it lands: the longest
  submission-to-workers wait seen for the run's recent worker jobs, with a quarter more
  and ``REPLACE_LEAD`` to spare, before its landing point (:func:`successor_due`). A job
  being replaced no longer counts towards ``max_jobs`` (its successor does), and its
  successor is not capacity to come for the backlog while it still runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

PENDING = "PENDING"
RUNNING = "RUNNING"
#: The first back-off after a failed submission, and the longest.
BACKOFF_SECONDS = 10.0
BACKOFF_MAX = 300.0
#: Failed submissions in a row after which growth pauses.
MAX_FAILURES = 4
#: A successor is due this long, plus the waits seen, before its predecessor lands: the
#: pool notices a job's start and its workers' joining only every few seconds.
REPLACE_LEAD = 15.0
#: The waits seen are stretched by this much (queues vary).
WAIT_SPREAD = 1.25
#: How many of the most recent waits count.
RECENT_WAITS = 5


@dataclass(frozen=True)
class JobView:
    """A worker job as the policy sees it."""

    job_id: str
    state: str  # PENDING or RUNNING (ended jobs are not passed)
    #: The CPUs it brings (what it asked SLURM for).
    cpus: float
    #: Since when all its workers have been idle (None: busy, or none joined yet).
    idle_since: float | None = None
    submitted: float = 0.0
    #: Its landing point (None: no time limit known, or not running yet).
    landing_at: float | None = None
    #: A successor was submitted for it.
    replaced: bool = False
    #: It is the successor of a job that still runs.
    replacing: bool = False


@dataclass(frozen=True)
class Situation:
    now: float
    backlog_cpus: float
    jobs: Sequence[JobView]
    max_jobs: int
    cpus_per_job: float
    idle_seconds: float
    #: Since when nothing has waited (None: something waits now). Pending jobs are
    #: cancelled, and idle running ones retired, only after ``idle_seconds`` of that:
    #: a backlog that empties between two of Snakemake's rounds changes nothing.
    empty_since: float | None = None
    #: No submission before this (back-off), and none at all once paused.
    next_submission: float = 0.0
    paused: bool = False
    #: Since when something has waited (None: nothing waits now).
    backlog_since: float | None = None
    grow_after: float = 0.0
    #: Seconds from submission until the workers joined, of the run's worker jobs so far.
    waits: Sequence[float] = ()


@dataclass(frozen=True)
class Decision:
    submit: int = 0
    cancel: tuple[str, ...] = ()  # pending jobs no longer needed
    retire: tuple[str, ...] = ()  # running jobs idle for long enough
    replace: tuple[str, ...] = ()  # running jobs whose successor is due now

    def __bool__(self) -> bool:
        return bool(self.submit or self.cancel or self.retire or self.replace)


def successor_due(landing_at: float, waits: Sequence[float]) -> float:
    """When to submit the successor of a job landing at ``landing_at``, so that its workers
    have joined by then: the longest of the recent ``waits`` (submission to workers
    joined), a quarter more, and ``REPLACE_LEAD`` before it."""
    wait = max(waits[-RECENT_WAITS:], default=0.0)
    return landing_at - wait * WAIT_SPREAD - REPLACE_LEAD


def decide(s: Situation) -> Decision:
    pending = [j for j in s.jobs if j.state == PENDING]
    coming = sum(j.cpus for j in pending if not j.replacing)
    uncovered = s.backlog_cpus - coming
    submit = 0
    waited = s.backlog_since is not None and s.now - s.backlog_since >= s.grow_after
    counted = sum(1 for j in s.jobs if not j.replaced)
    if uncovered > 0 and waited and not s.paused and s.now >= s.next_submission:
        wanted = math.ceil(uncovered / max(s.cpus_per_job, 1.0))
        submit = max(0, min(wanted, s.max_jobs - counted))
    replace: tuple[str, ...] = ()
    if not s.paused and s.now >= s.next_submission:
        replace = tuple(
            j.job_id
            for j in s.jobs
            if j.state == RUNNING
            and j.landing_at is not None
            and not j.replaced
            and (j.idle_since is None or s.backlog_cpus > 0)  # it still has work
            and s.now >= successor_due(j.landing_at, s.waits)
        )
    quiet = s.empty_since is not None and s.now - s.empty_since >= s.idle_seconds
    if not quiet:
        return Decision(submit, replace=replace)
    # Nothing has waited for a while: what is pending or idle is not needed (but the
    # successor of a job that still has work is).
    cancel = tuple(
        j.job_id
        for j in sorted(pending, key=lambda j: j.submitted, reverse=True)
        if not j.replacing
    )
    retire = tuple(
        j.job_id
        for j in s.jobs
        if j.state == RUNNING
        and j.idle_since is not None
        and s.now - j.idle_since >= s.idle_seconds
    )
    return Decision(submit, cancel, retire, replace)


def after_failure(failures: int, now: float) -> tuple[float, bool]:
    """After the ``failures``-th failed submission in a row: when to try again, and whether
    growth pauses for good."""
    delay = min(BACKOFF_SECONDS * 2 ** max(0, failures - 1), BACKOFF_MAX)
    return now + delay, failures >= MAX_FAILURES
