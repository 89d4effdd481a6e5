"""What a task's end asks of the cluster, the jobs of a worker that died, and a run whose
cluster broke: the pure decisions (:func:`..dispatch.recovery.decide`,
:class:`..dispatch.health.NoWorkers`) carried out with the cluster source, the dispatcher
and Snakemake's callbacks. A task's end is settled on the dispatch side
(:class:`..dispatch.ends.Settler`), which asks this (its
:class:`..dispatch.ends.ClusterSide`) only what needs the cluster; what asks nothing of the
cluster — failing a job, running it again, handing it over again elsewhere — is
:class:`..dispatch.again.Again`, which this calls once the cluster was asked.

Threads: the settling runs on Snakemake's status thread; whatever may wait for SLURM (is
the allocation or the worker job still there?) or for a dead worker's supervisor runs on
the recovery thread (:class:`..dispatch.recovery.Recovery`); failing the whole run runs on
a thread of its own. Which jobs are registered, and whether the run stops, is the
registry's to say, under its lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..clusters.base import ClusterSource
from ..dispatch.again import Again
from ..dispatch.dispatcher import Dispatcher
from ..dispatch.health import NoWorkers
from ..dispatch.outcomes import Finished, WorkerRef
from ..dispatch.recovery import Gone, Recovery, decide, read_record
from ..dispatch.registry import JobRecord, JobRegistry, counts_by_rule
from ..report.detail import detail
from ..report.messages import job_label, lost_worker_line
from ..worker.waiting import wait_until
from .say import Say

#: Seconds between checks that the cluster's processes are still alive.
HEALTH_CHECK_INTERVAL = 0.5
#: Seconds after its removal that a worker which stopped answering, and could not be ended
#: from here (its node cut off), may still run its jobs: it ends them itself once its
#: connection to the scheduler times out (Dask's comm timeout, 30 s after its last word,
#: which came a worker-ttl before its removal; measured 31 s after a cut), and its
#: supervisor records it.
SILENT_WORKER_GRACE = 35.0


@dataclass(frozen=True)
class Stopper:
    """Stopping jobs where they run: through the workers, or, when the scheduler is gone,
    by stopping the workers (whose supervisors end the jobs)."""

    source: ClusterSource
    dispatcher: Dispatcher

    def stop_jobs(self, keys: list[str]) -> set[str] | None:
        """Kill those jobs; each is then reported failed (blocks a few seconds). The keys
        that were running (None: not known, the scheduler is gone)."""
        if self.source.scheduler_lost():
            self.source.stop_workers()  # their supervisors end the jobs
            return None
        return self.dispatcher.stop(keys)

    def withdraw(self, keys: list[str]) -> dict[str, float] | None:
        """Take back those of ``keys`` that have not started (see
        :meth:`..dispatch.dispatcher.Dispatcher.withdraw`); None if nobody can be asked."""
        if self.source.scheduler_lost():
            return None
        return self.dispatcher.withdraw(keys)


class Failures:
    """The cluster's side of a task's end (a :class:`..dispatch.ends.ClusterSide`), a dead
    worker's jobs, a broken cluster."""

    def __init__(
        self,
        registry: JobRegistry,
        source: ClusterSource,
        dispatcher: Dispatcher,
        again: Again,
        startup_timeout: float,
        say: Say,
        detail_log: str = "",
    ):
        self.registry = registry
        self.source = source
        self.dispatcher = dispatcher
        #: Failing a job, running it again, handing it over again (the dispatch side).
        self.again = again
        self.snakemake = again.snakemake
        self.no_workers = NoWorkers(source.restarts_workers, startup_timeout, registry.logs)
        self.say = say
        self._next_health_check = 0.0
        #: Workers removed for silence: how each was ended ("" until it was).
        self._silent: dict[tuple[str, int | None], str] = {}
        #: ... and when each was removed.
        self._silent_at: dict[tuple[str, int | None], float] = {}
        #: Where each job's own words about a lost worker go (see report.messages).
        self.detail_log = detail_log
        self.recovery = Recovery(
            source.record_dir, source.sweep, self._on_gone, self._on_worker_removed
        )

    # -- what a task's end asks of the cluster (dispatch.ends.ClusterSide) ---------------

    def from_worker_job(self, worker: str) -> bool:
        growth = self.source.growth
        return growth is not None and growth.from_worker_job(worker)

    def later(self, call: Callable[[], None]) -> None:
        self.recovery.call(call)

    def lost(self, key: str, worker: WorkerRef) -> None:
        self.recovery.lost(key, worker)

    def unless_worker_job_ended(self, finished: Finished) -> None:
        noticed = time.time()
        self.recovery.call(lambda: self._unless_worker_job_ended(finished, noticed))

    def unless_allocation_ended(self, finished: Finished) -> None:
        # SLURM signals every process of an allocation it ends: ask it first (on the
        # recovery thread); such jobs are then reported with the one message.
        self.recovery.call(lambda: self._unless_allocation_ended(finished))

    def _unless_allocation_ended(self, finished: Finished) -> None:
        """(Recovery thread) A job killed by a signal the plugin did not send."""
        self._on_worker_removed()  # fails the run if SLURM ended the allocation
        if not self.registry.fatal:
            self.again.fail(finished)

    def _unless_worker_job_ended(self, finished: Finished, noticed: float) -> None:
        """(Recovery thread) A job that failed on a worker job's worker: lost with its
        worker job if that job is ending, else an ordinary failure."""
        growth = self.source.growth
        assert finished.on is not None and growth is not None  # routed so: on a worker job
        if growth.lost_with_its_job(finished.on.name, noticed):
            if finished.outcome is not None and not finished.outcome.start_error:
                self.dispatcher.note_ran(finished.key)  # its failure says it ran there
            self.say.info(
                f"job {finished.key} failed as its worker job ended under it: it runs "
                "again elsewhere once its processes are gone"
            )
            self.recovery.lost(finished.key, finished.on)
        else:
            self.again.fail(finished)

    # -- whether the cluster can still run jobs --------------------------------------------

    def check_cluster(self, force: bool = False) -> None:
        """At most twice a second (or now, with ``force``): whether the cluster can still
        run jobs; if not, fail the run."""
        now = time.monotonic()
        if self.registry.fatal or (
            not force and (now < self._next_health_check or self.registry.stop_reason)
        ):
            return
        self._next_health_check = now + HEALTH_CHECK_INTERVAL
        source = self.source
        problem = self.no_workers.check(
            now,
            self.dispatcher.worker_count,
            source.growth is not None and source.growth.workers_may_come(),
            source.scheduler_lost(),
            source.deaths,
        )
        if problem:
            # Workers gone because SLURM ended the allocation (a node failed, scancel): say
            # that, whichever the plugin saw first, its workers gone or its steps ended
            # (an srun step with a node that does not answer outlives its workers).
            ended = source.allocation_problem()
            problem = f"{ended}. What the plugin saw: {problem}" if ended else problem
        problem = problem or source.problem()
        if problem:
            self.start_fail_run(f"the Dask cluster broke: {problem}")

    def start_fail_run(self, reason: str) -> None:
        if self.registry.begin_fatal(reason):
            threading.Thread(target=self._fail_run, args=(reason,), daemon=True).start()

    def _fail_run(self, reason: str) -> None:
        """Stop every job, then fail each, with one message for all of them.

        The jobs are failed only once their processes are gone (the workers stopped,
        whose supervisors end them), so that Snakemake's removal of their outputs is
        final: no job left running can write them back.
        """
        self.say.error(reason)
        keys = self.registry.keys()
        if keys and not self.source.scheduler_lost():
            self.dispatcher.stop(keys)
        self.source.stop_workers()
        for name, pid in list(self._silent_at):
            self._record_of_silent(name, pid)
        left = self.registry.take_all(reason, quiet=True)
        if left:
            self.say.error(
                f"stopping the run; the {len(left)} job(s) it still had, all ended now, "
                f"fail: {counts_by_rule([r.job for r in left.values()])}. Run the same "
                "command again (in a new allocation if this one ended): Snakemake redoes "
                "only what is missing."
            )
        for record in left.values():
            self.snakemake.failed(record.info, msg=f"stopped: {reason}")

    # -- a worker died ---------------------------------------------------------------------

    def worker_removed(self, worker: WorkerRef, silent: bool) -> None:
        """(Dask's event thread) A worker left the scheduler unexpectedly. One that stopped
        answering (Dask's worker-ttl) is ended at once where it runs, so that its
        supervisor ends its jobs and records it: they run again elsewhere within seconds,
        never while a copy may still run."""
        if silent:
            self._silent[worker.name, worker.pid] = ""
            self._silent_at[worker.name, worker.pid] = time.monotonic()
            self.recovery.call(lambda: self._end(worker))
        self.recovery.worker_removed()

    def _end(self, worker: WorkerRef) -> None:
        """(Recovery thread) End a worker that stopped answering."""
        how = self.source.end_worker(worker.name, worker.pid)
        self._silent[worker.name, worker.pid] = how or "it could not be ended from here"
        detail.info("worker %s (pid %s) stopped answering: %s", worker.name, worker.pid, how)

    def _on_worker_removed(self) -> None:
        """(Recovery thread) Did the allocation end under the workers?"""
        if not self.registry.fatal:
            problem = self.source.allocation_problem()
            if problem:
                self.start_fail_run(f"the Dask cluster broke: {problem}")

    def _on_gone(self, worker: WorkerRef, keys: list[str], gone: Gone | None) -> None:
        """(Recovery thread) The jobs of a dead worker: their processes are gone (or
        could not be ended): run each again elsewhere, or fail it. One line says what
        happened to the worker and its jobs; each job's own words go to the detail log
        (a failed job's also to Snakemake)."""
        self._on_worker_removed()
        self.check_cluster(force=True)  # no worker left to run them again?
        seen = self._record_of_silent(worker.name, worker.pid) if gone is None else None
        if seen is not None:  # it ended its jobs itself (see _record_of_silent)
            how = f"its supervisor ended the {seen.get('processes_killed', 0)} process(es)"
            gone = Gone(f"{how} its jobs had left", seen)
        running = waiting = 0
        failed: list[JobRecord] = []
        for key in keys:
            record = self.registry.get(key)
            if record is None or self.registry.fatal:  # reported, or left to _fail_run
                continue
            stop = self.registry.stop_reason
            verdict = decide(
                job_label(record.job), key, worker.name, gone, record.lost_on, stop,
                ran=self.dispatcher.ran(key),
            )  # fmt: skip
            detail.info(verdict.message.strip())
            if verdict.rerun:
                running += verdict.running
                waiting += not verdict.running
                self.again.rerun(key)
            elif self.registry.pop(key) is not None:
                if stop:  # the run's own closing message covers it
                    self.registry.quiet([key])
                failed.append(record)
                self.snakemake.failed(record.info, msg=verdict.message)
        if running or waiting or failed:
            self.say.warn(
                lost_worker_line(
                    worker.name, self._silent.pop((worker.name, worker.pid), None), gone,
                    running, waiting, len(failed), self.detail_log,
                )
            )  # fmt: skip

    def _record_of_silent(self, name: str, pid: int | None) -> dict[str, Any] | None:
        """The supervisor's record of a worker removed for silence, waited for until
        ``SILENT_WORKER_GRACE`` after its removal: until then its jobs may still write
        where it runs (a node cut off), and neither failing them (Snakemake removes their
        outputs) nor running them again is safe. None if it is no such worker, or if the
        record did not come (its node's file system cut off too)."""
        removed, record_dir = self._silent_at.get((name, pid)), self.source.record_dir
        if removed is None or record_dir is None:
            return None
        left = removed + SILENT_WORKER_GRACE - time.monotonic()
        if left > 0 and read_record(record_dir, name, pid) is None:
            detail.info("waiting up to %.0f s for the record of the silent worker %s", left, name)
            wait_until(lambda: read_record(record_dir, name, pid) is not None, left)
        return read_record(record_dir, name, pid)

    def close(self) -> None:
        self.recovery.close()
