"""The allocation's clock, for each job (pure): how long a job is expected to take, whether
it can finish before the run must land, and which running jobs to stop when it lands.

Times are seconds since the epoch (``time.time()``): the end comes from SLURM as a wall
time, and the decisions compare it with when jobs were handed over.

- **Expected duration**: the job's ``runtime`` resource (Snakemake's standard, minutes)
  when its rule sets one; otherwise, once ``MIN_SAMPLES`` jobs of its rule have succeeded in
  this run, the ``PERCENTILE`` of their measured durations; otherwise unknown.
- **Placement**: a job goes only where ``now + expected + safety`` is before the landing
  point (the end minus the landing margin): a worker whose allocation ends sooner cannot
  hold it (the run's own check here; workers that end at different times, by the runway
  of :mod:`...worker.clock`). A job of unknown duration goes anywhere (and counts as a risk
  at landing).
- **Landing**: at the landing point no new job starts; a running job whose expected end is
  before the hard stop (half the margin before the end) goes on, every other one is
  stopped now; at the hard stop whatever still runs is stopped, so that Snakemake ends
  normally (lock released, partial outputs removed) before SLURM's SIGTERM.
"""

from __future__ import annotations

import collections
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# The allocation's end and its margins are every worker's too (worker/clock.py).
from ...worker.clock import AllocationEnd as AllocationEnd
from ...worker.clock import Runway
from ...worker.clock import scaled_margins as scaled_margins

#: Jobs of a rule that must have succeeded before their durations are trusted.
MIN_SAMPLES = 3
#: The percentile of a rule's durations taken as its jobs' expected duration.
PERCENTILE = 0.9
#: Durations kept per rule (the most recent).
MAX_SAMPLES = 200


def percentile(values: Iterable[float], q: float) -> float:
    """The nearest-rank ``q`` percentile (0 < q <= 1) of ``values`` (not empty)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


class Durations:
    """Measured durations of the jobs that succeeded, per rule (a bounded window).

    The estimate is recomputed after a tenth of the window is new (or while fewer than
    ``MIN_SAMPLES * 4`` are known), not per job: it is read for every job a farm submits.
    """

    def __init__(self) -> None:
        self._samples: dict[str, collections.deque[float]] = {}
        self._estimates: dict[str, tuple[float, int]] = {}
        self._new: collections.Counter[str] = collections.Counter()

    def add(self, rule: str, seconds: float) -> None:
        samples = self._samples.get(rule)
        if samples is None:
            samples = self._samples[rule] = collections.deque(maxlen=MAX_SAMPLES)
        samples.append(seconds)
        self._new[rule] += 1

    def estimate(self, rule: str) -> tuple[float, int] | None:
        """The rule's expected duration and how many jobs it is based on, once known."""
        samples = self._samples.get(rule)
        if samples is None or len(samples) < MIN_SAMPLES:
            return None
        new = self._new[rule]
        if new and (rule not in self._estimates or new * 10 >= len(samples)
                    or len(samples) < MIN_SAMPLES * 4):  # fmt: skip
            self._estimates[rule] = (percentile(samples, PERCENTILE), len(samples))
            self._new[rule] = 0
        return self._estimates[rule]


def runtime_seconds(resources: Mapping[str, Any]) -> float | None:
    """A job's ``runtime`` resource in seconds (Snakemake keeps it in minutes), or None."""
    runtime = resources.get("runtime")
    if isinstance(runtime, bool) or not isinstance(runtime, int | float) or runtime <= 0:
        return None
    return float(runtime) * 60.0


@dataclass(frozen=True)
class Expected:
    """How long a job is expected to run (None: unknown) and where that comes from."""

    seconds: float | None
    source: str


def expected_duration(rule: str, resources: Mapping[str, Any], durations: Durations) -> Expected:
    runtime = runtime_seconds(resources)
    if runtime is not None:
        return Expected(runtime, "its runtime resource")
    learned = durations.estimate(rule)
    if learned is not None:
        seconds, count = learned
        return Expected(seconds, f"the {PERCENTILE:.0%} percentile of {count} earlier jobs")
    return Expected(None, "unknown")


def clock_line(job_id: str, end: AllocationEnd | None, now: float, landing: float) -> str:
    """The start-up line: when the allocation ends and when the run lands (``landing``:
    --dask-slurm-landing-margin), or that SLURM told no end."""
    if end is None:
        return (
            f"allocation {job_id} has no time limit SLURM could tell: no landing point; "
            "SIGUSR1 (e.g. sbatch --signal=USR1@120) lands the run"
        )
    shortened = (
        f" (a quarter of the time left, less than --dask-slurm-landing-margin "
        f"{landing:g}; --dask-slurm-runtime-margin scaled alike)"
        if end.margin < landing
        else ""
    )
    return (
        f"allocation {job_id} ends in {duration_text(end.end - now)}, at "
        f"{time.strftime('%H:%M:%S', time.localtime(end.end))} on every node (from "
        f"{end.source}): the run lands {duration_text(end.margin)} before, at "
        f"{time.strftime('%H:%M:%S', time.localtime(end.landing_at))}{shortened}, and "
        "a job starts only if it can finish by then; SIGUSR1 lands it at once"
    )


def landing_line(why: str, going_on: int, stopped: int, stopped_rules: str, waiting: int) -> str:
    """The landing's one line: what goes on, what is stopped, what never starts."""
    parts = [f"{going_on} started job(s) expected to finish in time go on"]
    if stopped:
        parts.append(
            f"{stopped} started job(s) that could not are stopped now ({stopped_rules}; "
            "Snakemake removes what they wrote)"
        )
    if waiting:
        parts.append(f"{waiting} job(s) that had not started are taken back, not run")
    return (
        f"{why}: landing. No job starts any more; {', '.join(parts)}. Snakemake ends as soon "
        "as the started jobs that go on are done."
    )


def fits(expected: float | None, now: float, landing_at: float, safety: float) -> bool:
    """Whether a job expected to take ``expected`` seconds can finish before
    ``landing_at`` (a job of unknown duration always may start before it)."""
    if now >= landing_at:
        return False
    return expected is None or now + expected + safety <= landing_at


def duration_text(seconds: float) -> str:
    """``50 s``, ``12 min``, ``1 h 5 min``, ``2 d 3 h``."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def refusal_message(label: str, expected: Expected, now: float, clock: AllocationEnd) -> str:
    """Why a job is not started: it cannot finish in the time left (``expected`` is
    unknown only once the landing point has passed)."""
    left = clock.landing_at - now
    if left <= 0:
        return (
            f"{label} was not started: the run is landing before the allocation's time "
            f"limit (it ends in {duration_text(clock.end - now)}). Run again in a new "
            "allocation and Snakemake continues from here."
        )
    assert expected.seconds is not None
    return (
        f"{label} was not started: it needs about {duration_text(expected.seconds)} "
        f"({expected.source}), but the allocation ends in {duration_text(clock.end - now)} "
        f"and the plugin lands {duration_text(clock.margin)} before that. Run again in a new "
        "allocation and Snakemake continues from here (or lower the rule's runtime "
        "resource if it is an overestimate)."
    )


@dataclass(frozen=True)
class Running:
    """A job handed over: when, and how long it is expected to take (None: unknown)."""

    key: str
    since: float
    expected: float | None


def to_stop_at_landing(running: Iterable[Running], clock: AllocationEnd) -> list[str]:
    """The jobs that cannot finish before the hard stop: unknown duration, or expected to
    end after it."""
    return stop_before(running, clock.hard_stop)


def stop_before(running: Iterable[Running], hard_stop: float) -> list[str]:
    """The jobs not expected to end by ``hard_stop`` (unknown duration included)."""
    return [
        job.key for job in running if job.expected is None or job.since + job.expected > hard_stop
    ]


#: A job stopped at a worker job's limit after running ``s`` seconds is then expected to
#: take at least this many times ``s`` (it did not finish in ``s``).
STOPPED_GROWTH = 1.5


def after_stop(expected: float | None, ran: float) -> float:
    """What a job stopped at a worker job's limit after ``ran`` seconds is expected to take
    from now on: more than it ran, so that it goes only where it can finish, and is refused
    once no worker job can hold it (instead of being stopped at every limit)."""
    return max(expected or 0.0, ran * STOPPED_GROWTH)


def worker_job_refusal(label: str, expected: Expected, safety: float, runway: Runway) -> str:
    """Why a job is not started in a farm of worker jobs only: no worker job can hold it."""
    assert expected.seconds is not None and runway.fresh is not None
    return (
        f"{label} was not started: it needs about {duration_text(expected.seconds)} "
        f"({expected.source}; with --dask-slurm-runtime-margin {duration_text(safety)} "
        f"more), but a worker job of --dask-slurm-worker-job-time "
        f"{duration_text(runway.limit)} offers a job at most about "
        f"{duration_text(runway.fresh)} (its limit, less the landing margin of "
        f"{duration_text(runway.margin)} and the time its workers take to join). Raise "
        "--dask-slurm-worker-job-time (within the partition's limit), or lower the rule's "
        "runtime resource if it is an overestimate."
    )
