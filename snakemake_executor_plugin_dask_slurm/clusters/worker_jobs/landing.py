"""Each worker job's landing, the worker jobs' side of the clock (the run's side of the same
landing is :class:`...dispatch.clock.worker_jobs.WorkerJobLanding`, reached through the
:class:`..base.Landings` the run hands the source's clock).

squeue says how long each running worker job has left (:attr:`.job.WorkerJob.end_at`);
from its landing point (its end less the landing margin) it *lands*: its workers leave
Dask's running set (``dask_slurm_land``, which names the tasks they hold), the jobs they
hold are moved (not started) or stopped (cannot finish before its hard stop, halfway
through the margin) by the run, the rest finish; at the hard stop what still runs there is
stopped alike; each worker that holds nothing leaves through the scheduler
(``dask_slurm_retire_idle``) and the job ends by itself, before SLURM's SIGTERM (a job
still connected a few seconds before its end is cancelled). The pool calls
:meth:`Lander.due` at every tick; while a job still has work, its successor is the pool's
(:func:`.policy.successor_due`, from :meth:`Lander.landing_at`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ...worker.clock import Runway, scaled_margins
from ...worker.scheduler_preload import LAND_HANDLER, RETIRE_IDLE_HANDLER
from ..base import Landings
from .job import Action, State, WorkerJob
from .provider import SlurmProvider

logger = logging.getLogger(__name__)

#: A landed job still listed this long before its end is cancelled (it must not meet
#: SLURM's SIGTERM with jobs on it).
END_GUARD = 5.0

#: Calls a handler of the scheduler's (``name, **kwargs``).
CallScheduler = Callable[..., Any]


class Lander:
    """Lands each worker job before its time limit."""

    def __init__(
        self,
        provider: SlurmProvider,
        say: Callable[[str], None],
        warn: Callable[[str], None],
        runway: Runway | None = None,
        landing_margin: float = 0.0,
    ):
        self.provider = provider
        self.say, self.warn = say, warn
        #: The run's runway (None: worker jobs are not placed by time, see worker/clock.py).
        self.runway = runway
        #: --dask-slurm-landing-margin (0: worker jobs do not land by themselves).
        self.landing_margin = landing_margin
        #: What the run does with a landing job's jobs (set by the glue; None: nothing).
        self.landings: Landings | None = None
        #: Jobs a landing stopped (they run again elsewhere) or moved before they started.
        self.stopped_at_limit = 0
        self.moved_at_landing = 0

    def margin(self, job: WorkerJob) -> float:
        """How long before its end a job lands: the runway's margin, else the landing
        margin scaled to its lifetime (0: it does not land)."""
        if self.runway is not None:
            return self.runway.margin
        if self.landing_margin <= 0 or job.end_at is None:
            return 0.0
        start = job.started or job.joined or job.end_at
        return scaled_margins(job.end_at, start, self.landing_margin, 0.0)[0]

    def landing_at(self, job: WorkerJob) -> float | None:
        """Its landing point (None: it does not land, or its end is not known yet)."""
        margin = self.margin(job)
        if job.end_at is None or margin <= 0:
            return None
        return job.end_at - margin

    def due(
        self, jobs: Iterable[WorkerJob], held: Mapping[str, int], now: float, call: CallScheduler
    ) -> None:
        """Land each job at its landing point, stop what still runs at its hard stop, let
        its workers go once they hold nothing, cancel it if it is still there just before
        its end. ``held``: how many tasks each worker holds now."""
        for job in jobs:
            landing_at = self.landing_at(job)
            if job.state is State.ENDED or landing_at is None or job.end_at is None:
                continue
            if job.state is State.RUNNING and now >= landing_at:
                self._land(job, now, call)
            if job.state is not State.LANDING:
                continue
            hard_stop = job.end_at - self.margin(job) / 2
            if not job.hard_stopped and now >= hard_stop:
                self._hard_stop(job, call)
            idle = [name for name in sorted(job.workers) if held.get(name) == 0]
            if idle:  # out of the running set since the landing: nothing new comes to them
                call(RETIRE_IDLE_HANDLER, names=idle)
            connected = any(name in held for name in job.workers)
            if now >= job.end_at - END_GUARD and connected and not job.cancelled_at_end:
                job.cancelled_at_end = True
                self.provider.cancel([job.job_id])
                self.warn(
                    f"worker job {job.job_id} was still running {END_GUARD:.0f} s before its "
                    "time limit: cancelled (its workers' supervisors end what runs there)"
                )

    def summary(self) -> str:
        """What the landings did, for the pool's closing line."""
        return (
            f"; {self.stopped_at_limit} job(s) stopped at a worker job's time limit (run "
            f"again elsewhere), {self.moved_at_landing} moved unstarted off landing ones"
        )

    def _held(self, job: WorkerJob, why: str, call: CallScheduler) -> list[str]:
        """The tasks its workers hold, once they are out of the running set (nothing new
        goes to them)."""
        held: Mapping[str, list[str]] = call(LAND_HANDLER, names=sorted(job.workers))
        logger.debug("worker job %s %s: its workers hold %s", job.job_id, why, held)
        return [key for keys in held.values() for key in keys]

    def _land(self, job: WorkerJob, now: float, call: CallScheduler) -> None:
        assert job.end_at is not None
        keys = self._held(job, "lands", call)  # if the scheduler does not answer: next tick
        job.let_go(Action.LANDED, now)
        hard_stop = job.end_at - self.margin(job) / 2
        going_on = stopped = moved = 0
        if self.landings is not None and keys:
            going_on, stopped, moved = self.landings.land(job.job_id, keys, hard_stop)
        self.stopped_at_limit += stopped
        self.moved_at_landing += moved
        successor = f"; its successor is {job.successor}" if job.successor else ""
        self.say(
            f"worker job {job.job_id} lands, {job.end_at - now:.0f} s before its time limit: "
            f"no job starts there any more; {going_on} running job(s) expected to finish in "
            f"time go on, {stopped} that could not are stopped (they run again elsewhere), "
            f"{moved} not started go to other workers{successor}"
        )

    def _hard_stop(self, job: WorkerJob, call: CallScheduler) -> None:
        job.hard_stopped = True
        keys = self._held(job, "reached its hard stop", call)
        stopped = self.landings.stop(job.job_id, keys) if self.landings and keys else 0
        self.stopped_at_limit += stopped
        if stopped:
            self.say(
                f"worker job {job.job_id}: {stopped} job(s) still running at its hard stop "
                "are stopped (they run again elsewhere)"
            )
