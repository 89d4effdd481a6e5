"""Worker jobs: grow the farm with sbatch jobs whose workers join the run's scheduler, and
shrink it when they are idle (the lifecycle; the decisions are :mod:`.policy`'s).

- **Before anything starts**, its SLURM provider is prepared
  (:meth:`.provider.SlurmProvider.prepare`: sinfo, the batch script, ``sbatch --test-only``);
  every SLURM command goes through that provider.
- **A thread** (:meth:`WorkerJobs.start`) that every second asks the scheduler what waits
  and what each worker holds (one small RPC, ``dask_slurm_load``), every few seconds asks
  ``squeue`` about the worker jobs (one call for all), decides (:func:`.policy.decide`),
  and acts: ``sbatch``, ``scancel`` of pending jobs no longer needed, retirement of idle
  ones through the scheduler (``dask_slurm_retire_idle``: no job can be lost, see
  :mod:`...worker.scheduler_preload`), after which the job ends by itself.
- **At the end** (:meth:`WorkerJobs.close`), on every path: one ``scancel`` for every
  worker job still pending or running, then a check that ``squeue`` lists none.

- **Each job's clock**: squeue also says how long each running worker job has left; from
  its landing point (its end less the landing margin) it *lands*: its workers leave Dask's
  running set (``dask_slurm_land``), the jobs they hold are moved (not started) or stopped
  (cannot finish before its hard stop) by the run (:class:`..base.Landings`), the rest finish,
  then its workers retire through the scheduler and the job ends by itself, before SLURM's
  SIGTERM (a job still listed a few seconds before its end is cancelled). While it still
  has work its successor is submitted in time (:func:`.policy.successor_due`).

A worker job that ends under the run (scancel, its time limit, a node failure) is a worker
lost like any other: its supervisors end the jobs' processes and record it, and the
executor runs those jobs again elsewhere (:mod:`...dispatch.recovery`).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...slurm.run import SlurmCommandError, node_of_worker
from ...worker.clock import Runway, scaled_margins
from ...worker.scheduler_preload import (
    LAND_HANDLER,
    LOAD_HANDLER,
    RETIRE_IDLE_HANDLER,
    RUNWAY_HANDLER,
)
from ...worker.supervisor import Swept
from ...worker.waiting import wait_until
from ..base import Landings
from . import policy
from .job import LIVE, Action, End, Seen, State, WorkerJob, worker_job_of
from .provider import SLURM_TIMEOUT, SlurmProvider

if TYPE_CHECKING:
    from distributed import Client

logger = logging.getLogger(__name__)

#: Seconds between two looks at the scheduler's load, and between two squeue calls.
TICK_SECONDS = 1.0
POLL_SECONDS = 5.0
#: A backlog must last this long before a worker job is submitted.
GROW_AFTER = 5.0
RPC_TIMEOUT = 5.0
#: A retired job still listed this long after its workers left is cancelled.
RETIRE_GRACE = 30.0
#: A job that failed on a worker job's worker: the second look at that job's state.
ENDING_RECHECK = 0.5
#: Seconds close() waits for squeue to list no worker job any more.
GONE_TIMEOUT = 20.0
#: A landed job still listed this long before its end is cancelled (it must not meet
#: SLURM's SIGTERM with jobs on it).
END_GUARD = 5.0


class WorkerJobs:
    """The run's worker jobs: submitted, watched, retired, cancelled."""

    def __init__(
        self,
        provider: SlurmProvider,
        say: Callable[[str], None],
        warn: Callable[[str], None],
        runway: Runway | None = None,
        landing_margin: float = 0.0,
    ):
        #: SLURM: submit, status, cancel (prepared before the pool starts).
        self.provider = provider
        self.config = provider.config
        #: The run's runway (None: worker jobs are not placed by time, see worker/clock.py).
        self.runway = runway
        #: --dask-slurm-landing-margin (0: worker jobs do not land by themselves).
        self.landing_margin = landing_margin
        #: What the run does with a landing job's jobs (set by the glue; None: nothing).
        self.landings: Landings | None = None
        #: Seconds from submission until the workers joined, per job, in order.
        self.waits: list[float] = []
        #: Jobs a landing stopped (they run again elsewhere) or moved before they started.
        self.stopped_at_limit = 0
        self.moved_at_landing = 0
        self.say, self.warn = say, warn
        self.jobs: dict[str, WorkerJob] = {}
        self.failures = 0
        self.next_submission = 0.0
        self.paused = False
        self.backlog_since: float | None = None
        self.empty_since: float | None = None
        self.first_submission: float | None = None
        self.first_backlog: float | None = None
        self._last_poll = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        #: Calls a handler of the scheduler's (``name, **kwargs``): set by :meth:`start`.
        self.call_scheduler: Callable[..., Any] | None = None

    # -- the thread --------------------------------------------------------------------

    def start(self, client: Client) -> None:
        def call(handler: str, **kwargs: Any) -> Any:
            method = getattr(client.scheduler, handler)
            return client.sync(method, callback_timeout=RPC_TIMEOUT, **kwargs)

        self.call_scheduler = call
        if self.runway is not None:  # tasks waiting for a worker ask for time from now on
            call(RUNWAY_HANDLER, step=self.runway.step)
        self._thread = threading.Thread(target=self._run, name="dask-slurm-growth", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(TICK_SECONDS):
            try:
                self.tick(time.time())
            except Exception as e:  # one bad tick must not end growth
                logger.warning("dask-slurm: worker jobs: %s: %s", type(e).__name__, e)

    def tick(self, now: float) -> None:
        """Look at the scheduler's load (and, every few seconds, at SLURM's queue),
        decide, act."""
        if self.call_scheduler is None:
            return
        load = self.call_scheduler(LOAD_HANDLER)
        waiting = float(load.get("waiting_cpus", 0.0))
        held: dict[str, int] = load.get("workers", {})
        with self._lock:
            if now - self._last_poll >= POLL_SECONDS:
                self._poll(now)
            self._see_workers(held, now)
            if waiting > 0:
                self.backlog_since = self.backlog_since or now
                self.first_backlog = self.first_backlog or now
                self.empty_since = None
            else:
                self.backlog_since = None
                self.empty_since = self.empty_since or now
            self._land_due(held, now)
            live = [j for j in self.jobs.values() if j.state in LIVE]
            alive = {j.job_id for j in live}
            situation = policy.Situation(
                now=now,
                backlog_cpus=waiting,
                jobs=[j.view(self._landing_at(j), alive) for j in live],
                max_jobs=self.config.max_jobs,
                cpus_per_job=self.provider.cpus_per_job,
                idle_seconds=self.config.idle_seconds,
                empty_since=self.empty_since,
                next_submission=self.next_submission,
                paused=self.paused,
                backlog_since=self.backlog_since,
                grow_after=GROW_AFTER,
                waits=self.waits,
            )
            decision = policy.decide(situation)
            if decision.submit:
                self._submit(decision.submit, waiting, now)
            if decision.replace:
                self._submit(len(decision.replace), waiting, now, list(decision.replace))
            if decision.cancel:
                self._cancel(list(decision.cancel), now, Action.CANCELLED)
            for job_id in decision.retire:
                self._retire(self.jobs[job_id], now)
            self._cancel_stuck_retirements(now)

    def _see_workers(self, held: Mapping[str, int], now: float) -> None:
        by_job: dict[str, dict[str, int]] = {}
        for name, tasks in held.items():
            job_id = worker_job_of(name)
            if job_id is not None:
                by_job.setdefault(job_id, {})[name] = tasks
        for job_id, workers in by_job.items():
            job = self.jobs.get(job_id)
            if job is None:
                continue
            first, more = job.workers_hold(workers, now)
            if first:
                self.waits.append(now - job.submitted)
            if more:
                self.say(
                    f"worker job {job_id}: {len(job.workers)} worker(s) joined "
                    f"({', '.join(sorted(job.workers))}), "
                    f"{now - job.submitted:.0f} s after submission"
                )

    def _poll(self, now: float) -> None:
        self._last_poll = now
        ids = [j.job_id for j in self.jobs.values() if j.state is not State.ENDED]
        if not ids:
            return
        states = self.provider.status(ids)
        if states is None:
            return  # the controller did not answer: ask again next time
        for job_id in ids:
            job = self.jobs[job_id]
            seen = job.seen(states[job_id], now)
            if seen is Seen.STARTED:
                self.say(
                    f"worker job {job_id} started on {','.join(job.nodes) or '?'} after "
                    f"{now - job.submitted:.0f} s in the queue"
                )
            elif seen is Seen.ENDED and job.end is End.UNDER_THE_RUN:
                self._ended_under_the_run(job)

    def _ended_under_the_run(self, job: WorkerJob) -> None:
        ran = f" after running {job.ended - job.started:.0f} s" if job.started and job.ended else ""
        self.warn(
            f"worker job {job.job_id} ended under the run ({job.slurm_state}){ran}: the jobs its "
            f"workers ran are run again elsewhere; its log: {self.provider.log_of(job.job_id)}"
        )

    def _submit(
        self, count: int, waiting: float, now: float, replacing: Sequence[str] = ()
    ) -> None:
        """Submit ``count`` worker jobs (with ``replacing``: one successor for each)."""
        submitted = []
        for index in range(count):
            try:
                job_id, said = self.provider.submit()
            except SlurmCommandError as e:
                self.failures += 1
                self.next_submission, self.paused = policy.after_failure(self.failures, now)
                if self.paused:
                    self.warn(
                        f"worker jobs: {self.failures} submissions in a row failed, so the "
                        f"run stops growing and goes on with the workers it has. The last "
                        f"failure: {e}"
                    )
                else:
                    self.warn(
                        f"worker jobs: a submission failed, next try in "
                        f"{self.next_submission - now:.0f} s: {e}"
                    )
                break
            if job_id is None:
                self.warn(f"worker jobs: sbatch printed no job id: {said.strip()!r}")
                break
            self.failures = 0
            self.jobs[job_id] = WorkerJob(job_id, self.provider.cpus_per_job, now)
            submitted.append(job_id)
            if replacing:
                self.jobs[job_id].replaces = replacing[index]
                self.jobs[replacing[index]].successor = job_id
        name = self.provider.name
        if submitted and replacing:
            lines = []
            for job_id in submitted:
                old = self.jobs[self.jobs[job_id].replaces or ""]
                lands = (self._landing_at(old) or now) - now
                lines.append(
                    f"worker job {job_id} to replace {old.job_id} (it lands in {lands:.0f} s)"
                )
            wait = max(self.waits[-policy.RECENT_WAITS :], default=0.0)
            self.say(
                f"submitted {'; '.join(lines)} ({name}; the longest wait for its "
                f"workers so far: {wait:.0f} s)"
            )
            self._last_poll = 0.0
        elif submitted:
            self.first_submission = self.first_submission or now
            pending = sum(1 for j in self.jobs.values() if j.ended is None and not j.joined)
            self.say(
                f"submitted worker job(s) {', '.join(submitted)} ({name}): jobs wait for "
                f"{waiting:g} CPU(s); {pending} worker job(s) now queued or starting, at "
                f"most {self.config.max_jobs} at once"
            )
            self._last_poll = 0.0  # look at them soon

    # -- each job's clock ----------------------------------------------------------------

    def _margin(self, job: WorkerJob) -> float:
        """How long before its end a job lands: the runway's margin, else the landing
        margin scaled to its lifetime (0: it does not land)."""
        if self.runway is not None:
            return self.runway.margin
        if self.landing_margin <= 0 or job.end_at is None:
            return 0.0
        start = job.started or job.joined or job.end_at
        return scaled_margins(job.end_at, start, self.landing_margin, 0.0)[0]

    def _landing_at(self, job: WorkerJob) -> float | None:
        margin = self._margin(job)
        if job.end_at is None or margin <= 0:
            return None
        return job.end_at - margin

    def _land_due(self, held: Mapping[str, int], now: float) -> None:
        """Land each job at its landing point, stop what still runs at its hard stop, let
        its workers go once they hold nothing, cancel it if it is still there just before
        its end."""
        for job in self.jobs.values():
            landing_at = self._landing_at(job)
            if job.state is State.ENDED or landing_at is None or job.end_at is None:
                continue
            if job.state is State.RUNNING and now >= landing_at:
                self._land(job, now)
            if job.state is not State.LANDING:
                continue
            hard_stop = job.end_at - self._margin(job) / 2
            if not job.hard_stopped and now >= hard_stop:
                self._hard_stop(job)
            idle = [name for name in sorted(job.workers) if held.get(name) == 0]
            if idle:  # out of the running set since the landing: nothing new comes to them
                assert self.call_scheduler is not None
                self.call_scheduler(RETIRE_IDLE_HANDLER, names=idle)
            connected = any(name in held for name in job.workers)
            if now >= job.end_at - END_GUARD and connected and not job.cancelled_at_end:
                job.cancelled_at_end = True
                self.provider.cancel([job.job_id])
                self.warn(
                    f"worker job {job.job_id} was still running {END_GUARD:.0f} s before its "
                    "time limit: cancelled (its workers' supervisors end what runs there)"
                )

    def _held(self, job: WorkerJob, why: str) -> list[str]:
        """The tasks its workers hold, once they are out of the running set (nothing new
        goes to them)."""
        assert self.call_scheduler is not None
        held: Mapping[str, list[str]] = self.call_scheduler(LAND_HANDLER, names=sorted(job.workers))
        logger.debug("worker job %s %s: its workers hold %s", job.job_id, why, held)
        return [key for keys in held.values() for key in keys]

    def _land(self, job: WorkerJob, now: float) -> None:
        assert job.end_at is not None
        keys = self._held(job, "lands")  # if the scheduler does not answer: next tick
        job.let_go(Action.LANDED, now)
        hard_stop = job.end_at - self._margin(job) / 2
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

    def _hard_stop(self, job: WorkerJob) -> None:
        job.hard_stopped = True
        keys = self._held(job, "reached its hard stop")
        stopped = self.landings.stop(job.job_id, keys) if self.landings and keys else 0
        self.stopped_at_limit += stopped
        if stopped:
            self.say(
                f"worker job {job.job_id}: {stopped} job(s) still running at its hard stop "
                "are stopped (they run again elsewhere)"
            )

    def _cancel(self, ids: list[str], now: float, action: Action) -> None:
        if not ids:
            return
        self.provider.cancel(ids)
        for job_id in ids:
            self.jobs[job_id].let_go(action, now)
        if action is Action.CANCELLED:
            self.say(
                f"cancelled pending worker job(s) {', '.join(ids)}: nothing has waited for "
                f"{self.config.idle_seconds:g} s"
            )

    def _retire(self, job: WorkerJob, now: float) -> None:
        names = sorted(job.workers)
        assert self.call_scheduler is not None
        closed = self.call_scheduler(RETIRE_IDLE_HANDLER, names=names)
        if set(closed) != set(names):
            return  # one got a task meanwhile: it is not idle after all
        job.let_go(Action.RETIRED, now)
        self.say(
            f"worker job {job.job_id} retired: idle for {now - (job.idle_since or now):.0f} s "
            f"with nothing waiting; its worker(s) left, the job ends"
        )

    def _cancel_stuck_retirements(self, now: float) -> None:
        stuck = [
            j.job_id
            for j in self.jobs.values()
            if j.action is Action.RETIRED
            and j.state is not State.ENDED
            and now - (j.action_at or now) > RETIRE_GRACE
        ]
        if stuck:
            self.provider.cancel(stuck)
            for job_id in stuck:
                self.jobs[job_id].action_at = now  # once per grace period

    # -- what the executor asks ----------------------------------------------------------

    def active(self) -> bool:
        """Whether workers may still come: a worker job is queued or running, or growth
        can still submit."""
        with self._lock:
            if any(j.state in LIVE for j in self.jobs.values()):
                return True
            return not self.paused

    def owns(self, worker: str) -> bool:
        return worker_job_of(worker) is not None

    def ending(self, worker: str, since: float) -> bool:
        """Whether the worker job of ``worker`` has ended or is ending, as SLURM tells it
        after ``since`` (when a job's failure was noticed). SLURM changes a job's state
        before it signals its processes, so a job killed with it sees this; one more
        look half a second later covers a failure that raced the change. Failures noticed
        together share the same squeue calls."""
        job = self.jobs.get(worker_job_of(worker) or "")
        if job is None:
            return False
        for after in (since, since + ENDING_RECHECK):
            time.sleep(max(0.0, after - time.time()))
            with self._lock:
                if self._last_poll <= after:
                    self._poll(time.time())
            if job.state is State.ENDED or job.slurm_state != "RUNNING":
                return True
        return False

    def sweep(self, worker: str, keys: list[str]) -> Swept | None:
        """End the jobs' processes left where a worker job's worker died."""
        job, node = self._where(worker)
        if job is None:
            return None
        with self._lock:
            self._poll(time.time())
        if job.state is State.ENDED:
            return Swept(
                f"SLURM ended worker job {job.job_id} ({job.slurm_state}) and every process in it"
            )
        if node is None:
            return None
        return self.provider.sweep(job.job_id, node, keys)

    def end_worker(self, worker: str, pid: int) -> str | None:
        """End a silent worker of a worker job, with a step in that job on its node."""
        job, node = self._where(worker)
        if job is None or node is None or job.state is State.ENDED:
            return None
        return self.provider.end_worker(job.job_id, node, pid)

    def _where(self, worker: str) -> tuple[WorkerJob | None, str | None]:
        """The worker job a worker runs in, and its node."""
        job = self.jobs.get(worker_job_of(worker) or "")
        return job, node_of_worker(worker, job.nodes) if job is not None else None

    # -- the end -------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop deciding (before the client closes)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=RPC_TIMEOUT + SLURM_TIMEOUT)

    def close(self) -> None:
        """Cancel every worker job still queued or running (one scancel), and check that
        squeue lists none any more."""
        self.stop()
        with self._lock:
            left = [j.job_id for j in self.jobs.values() if j.state is not State.ENDED]
            if not left:
                return
            now = time.time()
            for job_id in left:
                job = self.jobs[job_id]
                if job.state in LIVE:
                    job.let_go(Action.STOPPED, now)
            self.provider.cancel(left)

            def none_left() -> bool:
                self._poll(time.time())
                return all(j.state is State.ENDED for j in self.jobs.values())

            wait_until(none_left, GONE_TIMEOUT, interval=0.5)
            still = [j.job_id for j in self.jobs.values() if j.state is not State.ENDED]
        if still:
            self.warn(
                f"worker job(s) {', '.join(still)} still listed by squeue "
                f"{GONE_TIMEOUT:.0f} s after scancel; check with 'squeue --jobs="
                f"{','.join(still)}' and cancel them with 'scancel {' '.join(still)}'"
            )

    def summary(self) -> str | None:
        """One line for the end of the run: how many, for how long."""
        if not self.jobs:
            return None
        jobs = list(self.jobs.values())
        ran = [j for j in jobs if j.ran]
        now = time.time()
        node_seconds = sum(j.node_seconds(now) for j in ran)
        ends: dict[str, int] = {}
        for j in jobs:
            ends[j.end_words()] = ends.get(j.end_words(), 0) + 1
        how = ", ".join(f"{n} {what}" for what, n in sorted(ends.items()))
        first = (
            f"; first submitted {self.first_submission - self.first_backlog:.1f} s after "
            "jobs began to wait"
            if self.first_submission and self.first_backlog
            else ""
        )
        landings = ""
        if any(j.action is Action.LANDED for j in jobs):
            landings = (
                f"; {self.stopped_at_limit} job(s) stopped at a worker job's time limit (run "
                f"again elsewhere), {self.moved_at_landing} moved unstarted off landing ones"
            )
        return (
            f"worker jobs: {len(jobs)} submitted, {len(ran)} ran, for "
            f"{math.ceil(node_seconds / 60)} node-minute(s) in all ({how}){first}{landings}"
        )
