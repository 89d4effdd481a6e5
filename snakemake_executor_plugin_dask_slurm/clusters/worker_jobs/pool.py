"""Worker jobs: the loop that grows the farm with sbatch jobs whose workers join the run's
scheduler, and shrinks it when they are idle. The decisions are :mod:`.policy`'s, every
SLURM command the provider's (:mod:`.provider`, prepared before the loop starts), each
worker job's state its own (:mod:`.job`), each one's landing :mod:`.landing`'s.

A thread (:meth:`WorkerJobs.start`) every second asks the scheduler what waits and what
each worker holds (one small RPC, ``dask_slurm_load``), every few seconds asks SLURM about
the worker jobs (one squeue for all), lands those whose landing point came, decides
(:func:`.policy.decide`) and acts: ``sbatch`` (a successor, in time, for a landing job
that still has work), ``scancel`` of pending jobs no longer needed, retirement of idle ones
through the scheduler (``dask_slurm_retire_idle``: no job can be lost, see
:mod:`...worker.scheduler_preload`), after which the job ends by itself. It answers what
the source asks (:mod:`.growing`), and at the end (:meth:`WorkerJobs.close`, on every
path) cancels every worker job still there in one ``scancel`` and checks that squeue lists
none. A worker job that ends under the run (scancel, its time limit, a node failure) is a
worker lost like any other: its supervisors end the jobs' processes and record it, and the
executor runs those jobs again elsewhere (:mod:`...dispatch.recovery`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...slurm.run import SlurmCommandError, node_of_worker
from ...worker.scheduler_preload import (
    LOAD_HANDLER,
    RETIRE_IDLE_HANDLER,
    RUNWAY_HANDLER,
)
from ...worker.waiting import wait_until
from . import policy
from .job import LIVE, Action, End, Seen, State, WorkerJob, tally, worker_job_of
from .landing import Lander
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
#: Seconds close() waits for squeue to list no worker job any more.
GONE_TIMEOUT = 20.0
#: Seconds a worker job whose workers left with the run's close gets to end by itself
#: before it is cancelled (its batch script returns at once: see WorkerJobs.close).
ENDING_GRACE = 3.0


class WorkerJobs:
    """The run's worker jobs: submitted, watched, retired, cancelled."""

    def __init__(self, lander: Lander):
        #: Each worker job's landing before its time limit (and the run's runway); its
        #: provider and its say/warn are the pool's.
        self.lander = lander
        #: SLURM: submit, status, cancel (prepared before the pool starts).
        self.provider: SlurmProvider = lander.provider
        self.config = lander.provider.config
        self.say, self.warn = lander.say, lander.warn
        #: Seconds from submission until the workers joined, per job, in order.
        self.waits: list[float] = []
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
        runway = self.lander.runway
        if runway is not None:  # tasks waiting for a worker ask for time from now on
            call(RUNWAY_HANDLER, step=runway.step)
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
            self._see_backlog(waiting, now)
            self.lander.due(self.jobs.values(), held, now, self.call_scheduler)
            self._act(policy.decide(self._situation(waiting, now)), waiting, now)

    def _see_backlog(self, waiting: float, now: float) -> None:
        if waiting > 0:
            self.backlog_since = self.backlog_since or now
            self.first_backlog = self.first_backlog or now
            self.empty_since = None
        else:
            self.backlog_since = None
            self.empty_since = self.empty_since or now

    def running_jobs(self) -> int:
        """Worker jobs whose workers joined (another thread may read it: a copy first)."""
        return sum(1 for j in list(self.jobs.values()) if j.state is State.RUNNING)

    def _situation(self, waiting: float, now: float) -> policy.Situation:
        """What the policy decides from: the backlog and the live worker jobs."""
        live = [j for j in self.jobs.values() if j.state in LIVE]
        alive = {j.job_id for j in live}
        return policy.Situation(
            now=now,
            backlog_cpus=waiting,
            jobs=[j.view(self.lander.landing_at(j), alive) for j in live],
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

    def _act(self, decision: policy.Decision, waiting: float, now: float) -> None:
        if decision.submit:
            self._submit(decision.submit, waiting, now)
        if decision.replace:
            self._submit(len(decision.replace), waiting, now, list(decision.replace))
        if decision.cancel:
            self._cancel(list(decision.cancel), now)
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
                ran = f" after running {now - job.started:.0f} s" if job.started else ""
                self.warn(
                    f"worker job {job_id} ended under the run ({job.slurm_state}){ran}: the "
                    "jobs its workers ran are run again elsewhere; its log: "
                    f"{self.provider.log_of(job_id)}"
                )

    def _submit(
        self, count: int, waiting: float, now: float, replacing: Sequence[str] = ()
    ) -> None:
        """Submit ``count`` worker jobs (with ``replacing``: one successor for each)."""
        submitted = []
        for index in range(count):
            job_id = self._submit_one(now)
            if job_id is None:
                break
            self.jobs[job_id] = WorkerJob(job_id, self.provider.cpus_per_job, now)
            submitted.append(job_id)
            if replacing:
                self.jobs[job_id].replaces = replacing[index]
                self.jobs[replacing[index]].successor = job_id
        self._say_submitted(submitted, bool(replacing), waiting, now)

    def _submit_one(self, now: float) -> str | None:
        """One sbatch: the job's id, or None (a failure counted, and said)."""
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
            return None
        if job_id is None:
            self.warn(f"worker jobs: sbatch printed no job id: {said.strip()!r}")
            return None
        self.failures = 0
        return job_id

    def _say_submitted(
        self, submitted: list[str], replacing: bool, waiting: float, now: float
    ) -> None:
        if not submitted:
            return
        self._last_poll = 0.0  # look at them soon
        name = self.provider.name
        if replacing:
            lines = []
            for job_id in submitted:
                old = self.jobs[self.jobs[job_id].replaces or ""]
                lands = (self.lander.landing_at(old) or now) - now
                lines.append(
                    f"worker job {job_id} to replace {old.job_id} (it lands in {lands:.0f} s)"
                )
            wait = max(self.waits[-policy.RECENT_WAITS :], default=0.0)
            self.say(
                f"submitted {'; '.join(lines)} ({name}; the longest wait for its "
                f"workers so far: {wait:.0f} s)"
            )
            return
        self.first_submission = self.first_submission or now
        pending = sum(1 for j in self.jobs.values() if j.ended is None and not j.joined)
        self.say(
            f"submitted worker job(s) {', '.join(submitted)} ({name}): jobs wait for "
            f"{waiting:g} CPU(s); {pending} worker job(s) now queued or starting, at "
            f"most {self.config.max_jobs} at once"
        )

    def _cancel(self, ids: list[str], now: float) -> None:
        """Pending jobs no longer needed."""
        self.provider.cancel(ids)
        for job_id in ids:
            self.jobs[job_id].let_go(Action.CANCELLED, now)
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

    # -- what the source asks (clusters/worker_jobs/growing.py) --------------------------

    def active(self) -> bool:
        """Whether workers may still come: a worker job is queued or running, or growth
        can still submit."""
        with self._lock:
            if any(j.state in LIVE for j in self.jobs.values()):
                return True
            return not self.paused

    def owns(self, worker: str) -> bool:
        return worker_job_of(worker) is not None

    def where(self, worker: str) -> tuple[WorkerJob | None, str | None]:
        """The worker job a worker runs in, and its node."""
        job = self.jobs.get(worker_job_of(worker) or "")
        return job, node_of_worker(worker, job.nodes) if job is not None else None

    def refresh(self, after: float | None = None) -> None:
        """Ask SLURM about the worker jobs now, unless it was asked after ``after``."""
        with self._lock:
            if after is None or self._last_poll <= after:
                self._poll(time.time())

    # -- the end -------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop deciding (before the client closes)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=RPC_TIMEOUT + SLURM_TIMEOUT)

    def close(self) -> None:
        """Cancel every worker job still queued (one scancel); give those whose workers
        joined ENDING_GRACE to end by themselves (their workers left with the run's close,
        and their batch script then returns: cancelled meanwhile, SLURM writes CANCELLED
        in their log, a worker job's end that looks like a failure), then cancel what is
        left; and check that squeue lists none any more."""
        self.stop()
        with self._lock:
            left = [j.job_id for j in self.jobs.values() if j.state is not State.ENDED]
            if not left:
                return
            joined = [j for j in left if self.jobs[j].state is not State.PENDING]
            now = time.time()
            for job in (self.jobs[j] for j in left if self.jobs[j].state in LIVE):
                job.let_go(Action.STOPPED, now)
            if queued := [j for j in left if j not in joined]:
                self.provider.cancel(queued)
            if joined and not wait_until(lambda: self._ended(joined), ENDING_GRACE, 0.5):
                self.provider.cancel([j for j in joined if self.jobs[j].state is not State.ENDED])
            wait_until(lambda: self._ended(list(self.jobs)), GONE_TIMEOUT, interval=0.5)
            still = [j.job_id for j in self.jobs.values() if j.state is not State.ENDED]
        if still:
            self.warn(
                f"worker job(s) {', '.join(still)} still listed by squeue "
                f"{GONE_TIMEOUT:.0f} s after scancel; check with 'squeue --jobs="
                f"{','.join(still)}' and cancel them with 'scancel {' '.join(still)}'"
            )

    def _ended(self, jobs: list[str]) -> bool:
        """Whether squeue, asked now, lists none of ``jobs`` any more."""
        self._poll(time.time())
        return all(self.jobs[j].state is State.ENDED for j in jobs)

    def summary(self) -> str | None:
        """One line for the end of the run: how many, for how long."""
        if not self.jobs:
            return None
        jobs = list(self.jobs.values())
        first = (
            f"; first submitted {self.first_submission - self.first_backlog:.1f} s after "
            "jobs began to wait"
            if self.first_submission and self.first_backlog
            else ""
        )
        landed = any(j.action is Action.LANDED for j in jobs)
        return tally(jobs, time.time()) + first + (self.lander.summary() if landed else "")
