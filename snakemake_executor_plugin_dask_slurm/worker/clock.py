"""Every worker's clock (pure, standard library only): its landing point, the time grid it
advertises to Dask, and the check a worker makes before it starts a job.

A worker in an allocation with a time limit (the run's own, or a worker job's) has a
*landing point*: its allocation's end minus the landing margin. It learns it from its
environment (:data:`LANDING_VARIABLE`, set by whoever starts it), and starts no job that
cannot finish by then (:func:`too_late`).

**Placement by time left, Dask-native.** When workers of one run end at different times
(worker jobs), each worker also advertises a *runway*: one Dask resource per point of an
absolute time grid (``until-<epoch seconds>``, multiples of the run's grid step), for every
point from its start up to its landing point, each in a quantity no job set can use up. A
job expected to need ``needs`` seconds asks for one unit of the first point at or after
``now + needs``: Dask then places it only on a worker whose landing point is at or after
that point, and keeps it (its ``no-worker`` state, which growth counts as backlog) while no
worker has it, until one that does joins. Rounding the job's need up to the grid and the
worker's landing down to it keeps placement on the safe side, by at most two steps.

The grid step is chosen once per run (:func:`grid_step`): fine enough for the shortest
lifetime a worker has (a sixtieth of it), coarse enough that the longest needs at most
``MAX_POINTS`` points. A worker also advertises the points of one worker-job lifetime
before its start (jobs handed over earlier, waiting on other workers, may move to it); a
job that waits for a worker (Dask's ``no-worker`` state) has its point moved on as time
passes, by the scheduler (:func:`.scheduler_preload.refresh_runway`), so that a worker
that joins later can take it however long it waited.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

#: The worker's landing point, seconds since the epoch (set in its environment).
LANDING_VARIABLE = "DASK_SLURM_LANDING_AT"
#: Name of a runway resource: this prefix and a grid point (seconds since the epoch).
RUNWAY_PREFIX = "until-"
#: How much of each runway resource a worker offers: more than any set of jobs can hold.
RUNWAY_QUANTITY = 1_000_000
#: Bounds of the grid step, seconds.
MIN_STEP = 1
#: The step is at most this fraction of the shortest worker lifetime...
RESOLUTION = 60
#: ...unless the longest would then need more grid points than this.
MAX_POINTS = 512
#: A worker never advertises more points than this (a limit raised after its start).
MAX_ADVERTISED = 2 * MAX_POINTS


@dataclass(frozen=True)
class AllocationEnd:
    """When an allocation ends and the margins the plugin keeps before it."""

    #: The allocation's end, seconds since the epoch.
    end: float
    #: Land this long before the end (--dask-slurm-landing-margin).
    margin: float
    #: Added to a job's expected duration when placing it (--dask-slurm-runtime-margin).
    safety: float
    #: Where the end came from, for the log.
    source: str

    @property
    def landing_at(self) -> float:
        return self.end - self.margin

    @property
    def hard_stop(self) -> float:
        return self.end - self.margin / 2


def scaled_margins(end: float, now: float, landing: float, runtime: float) -> tuple[float, float]:
    """The landing margin and the runtime margin for an allocation ending at ``end``: as set
    (--dask-slurm-landing-margin, --dask-slurm-runtime-margin), except that a short
    allocation scales both down, the landing margin to at most a quarter of the time left,
    so that it still does work."""
    if landing <= 0:
        return 0.0, 0.0
    margin = min(landing, max(0.0, end - now) / 4)
    return margin, runtime * margin / landing


@dataclass(frozen=True)
class Runway:
    """How one run places jobs by their workers' time left: its grid step, and the margins
    of its worker jobs (chosen once, at start-up, from their time limit)."""

    #: The grid step, whole seconds.
    step: int
    #: A worker job lands this long before its end; half of it is its hard stop.
    margin: float
    #: Added to a job's expected duration when placing it.
    safety: float
    #: The most a job may need to fit a fresh worker job (its limit, less the margin, the
    #: time its workers take to join and a grid step); None when the run's own workers
    #: take what a worker job cannot (they outlive every worker job that matters).
    fresh: float | None
    #: The worker jobs' time limit, seconds (for messages, and how far back a worker's
    #: runway reaches: see :func:`advertised`).
    limit: float

    def point(self, at: float) -> int:
        """The first grid point at or after ``at``."""
        return math.ceil(at / self.step) * self.step


#: Time allowed for a worker job's workers to join after it starts: at most this, and at
#: most an eighth of its limit.
JOIN_ALLOWANCE = 60.0


def plan_runway(
    limit: float | None, run_left: float | None, run_workers: bool, landing: float, runtime: float
) -> Runway | None:
    """The run's runway, when its worker jobs have a known time limit (``limit`` seconds)
    and its own workers (``run_workers``: srun mode) an end too (``run_left`` seconds from
    now; None: no time limit). ``landing`` and ``runtime`` are --dask-slurm-landing-margin
    and --dask-slurm-runtime-margin. None: no runway (no limit to place by, or workers
    without an end beside workers with one, which no grid can describe)."""
    if limit is None or landing <= 0 or (run_workers and run_left is None):
        return None
    margin, safety = scaled_margins(limit, 0.0, landing, runtime)
    usable = limit - margin
    longest = max(usable, run_left or 0.0)
    step = grid_step(usable, longest)
    # The run's own workers outlive what matters (the run lands with them): they take
    # what no worker job can. Without them a job must fit a fresh worker job.
    fresh = None if run_workers else usable - min(JOIN_ALLOWANCE, limit / 8) - step
    return Runway(step, margin, safety, fresh, limit)


def grid_step(shortest: float, longest: float) -> int:
    """The run's grid step for worker lifetimes (landing point minus start) between
    ``shortest`` and ``longest`` seconds."""
    step = max(shortest / RESOLUTION, longest / MAX_POINTS, float(MIN_STEP))
    return math.ceil(step)


def runway_name(point: int) -> str:
    return f"{RUNWAY_PREFIX}{point}"


def is_runway(name: str) -> bool:
    return name.startswith(RUNWAY_PREFIX)


def runway_request(needs: float, now: float, step: int) -> str:
    """The runway resource a job needing ``needs`` seconds from ``now`` asks one unit of."""
    return f"{RUNWAY_PREFIX}{math.ceil((now + needs) / step) * step}"


def advertised(landing_at: float, now: float, step: int, lookback: float = 0.0) -> dict[str, float]:
    """The runway a worker started at ``now`` and landing at ``landing_at`` offers: every
    grid point from ``lookback`` seconds before ``now`` up to its landing point (at most
    ``MAX_ADVERTISED``). The points before its start are those of jobs handed over earlier
    and still waiting on other workers: it may take them (Dask's stealing), since it lands
    after them."""
    first = math.ceil((now - lookback) / step)
    last = min(math.floor(landing_at / step), first + MAX_ADVERTISED - 1)
    return {runway_name(k * step): float(RUNWAY_QUANTITY) for k in range(first, last + 1)}


def point_of(name: str) -> int | None:
    """The grid point a runway resource names (None: not one)."""
    if not name.startswith(RUNWAY_PREFIX):
        return None
    digits = name[len(RUNWAY_PREFIX) :]
    return int(digits) if digits.isdigit() else None


def without_runway(resources: Mapping[str, float]) -> dict[str, float]:
    """A worker's resources without its runway (what admission compares jobs with)."""
    return {name: value for name, value in resources.items() if not is_runway(name)}


def too_late(needs: float | None, now: float, landing_at: float) -> bool:
    """Whether a job needing ``needs`` seconds (None: unknown) may no longer start on a
    worker landing at ``landing_at``: from the landing point nothing starts, before it
    only what can finish by then."""
    return now >= landing_at or (needs is not None and now + needs > landing_at)


def landing_from_env(env: Mapping[str, str]) -> float | None:
    """The landing point a worker was started with (None: it has no time limit)."""
    try:
        value = float(env.get(LANDING_VARIABLE, ""))
    except ValueError:
        return None
    return value if value > 0 else None


def late_words(needs: float | None, now: float, landing_at: float) -> str:
    """Why a job did not start on its worker (for the detail log)."""
    left = max(0.0, landing_at - now)
    if needs is None or now >= landing_at:
        return f"not started: its worker reached its landing point ({left:.0f} s left)"
    return (
        f"not started: it needs about {needs:.0f} s with the margin, and its worker lands "
        f"in {left:.0f} s"
    )
