"""Both ends of a job's trip through dispatch, each one call from the executor: a round of
Snakemake's jobs handed over in chunks (:meth:`Submitter.submit_round`,
:meth:`Submitter.submit`), and a finished task settled
(:meth:`Settler.settle`): the listeners told, the end routed (:func:`.routing.route`), and
what asks nothing of the cluster carried out here (a success told, a failure, a move). What
does ask the cluster (a worker job's or the allocation's end, a dead worker's processes, a
broken cluster) is the executor's, injected as a :class:`ClusterSide`.

Threads: ``submit`` runs on Snakemake's scheduling thread, ``settle`` on its status thread;
both per job, so each does no more per job than the hand-over and the routing need.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ..worker import timing
from .again import Again
from .dispatcher import Dispatcher
from .intake import Intake
from .listeners import Listeners
from .outcomes import Finished, WorkerRef
from .registry import JobRegistry
from .routing import Route, RunState, route

#: A scheduling round goes to Dask in chunks: one graph update per chunk (and resource
#: request), sent when it holds CHUNK_JOBS jobs or its first job has waited CHUNK_SECONDS,
#: so that the first tasks of a large round start at once.
CHUNK_JOBS = 64
CHUNK_SECONDS = 0.02


class ClusterSide(Protocol):
    """What settling a task's end asks of the cluster (the executor's
    :class:`..executor.failures.Failures`). Whatever may wait (for SLURM, for a dead
    worker's processes) runs on its recovery thread, in order."""

    def from_worker_job(self, worker: str) -> bool:
        """Whether the worker ``worker`` runs in a worker job (not the run's own)."""
        ...

    def check_cluster(self, force: bool = False) -> None:
        """Whether the cluster can still run jobs; if not, fail the run."""
        ...

    def later(self, call: Callable[[], None]) -> None:
        """Run ``call`` on the recovery thread."""
        ...

    def lost(self, key: str, worker: WorkerRef) -> None:
        """The job of ``key`` was lost with ``worker``: once its processes are known gone,
        it runs again elsewhere or fails (it stays registered meanwhile)."""
        ...

    def unless_worker_job_ended(self, finished: Finished) -> None:
        """It failed on a worker job's worker: lost with that job if it is ending, else
        failed."""
        ...

    def unless_allocation_ended(self, finished: Finished) -> None:
        """Killed by a signal the plugin did not send: the run fails if SLURM ended the
        allocation, else the job failed."""
        ...


class Submitter:
    """A chunk of Snakemake's jobs: admitted and built (:class:`.intake.Intake`),
    registered, announced to Snakemake and handed to Dask; those that cannot run refused,
    one by one."""

    def __init__(
        self,
        intake: Intake,
        registry: JobRegistry,
        dispatcher: Dispatcher,
        listeners: Listeners,
        again: Again,
    ):
        self.intake = intake
        self.registry = registry
        self.dispatcher = dispatcher
        self.listeners = listeners
        self.again = again

    def submit_round(self, jobs: Sequence[Any], announce: Callable[[Any], None]) -> None:
        """A scheduling round: each job is announced (``announce``: Snakemake's
        ``run_job_pre``) as Snakemake's default does, and submitted with the other jobs of
        its chunk."""
        chunk: list[Any] = []
        flush_at = 0.0
        for job in jobs:
            announce(job)
            if timing.ON:
                timing.record("submit", self.intake.key_of(job), time.time())
            if not chunk:
                flush_at = time.monotonic() + CHUNK_SECONDS
            chunk.append(job)
            if len(chunk) >= CHUNK_JOBS or time.monotonic() >= flush_at:
                self.submit(chunk)
                chunk = []
        if chunk:
            self.submit(chunk)

    def submit(self, jobs: Sequence[Any]) -> None:
        """One chunk: a job that cannot run or be built is refused alone (Snakemake told
        it failed); the rest registered, announced to Snakemake and handed to Dask."""
        registry, listeners, snakemake = self.registry, self.listeners, self.again.snakemake
        records, refused = self.intake.take(jobs)
        stopping, lost = registry.hand_over(
            records, snakemake.submitted, self.dispatcher.submit_many
        )
        if listeners:
            listeners.refused([key for i, _ in stopping if (key := i.external_jobid)])
            listeners.handed_over([r for r in records if registry.get(r.key) is r])
        for job_info, msg in refused + stopping:
            snakemake.submitted(job_info, register_job=False)
            snakemake.failed(job_info, msg=msg)
        self.again.report_refused(lost)


class Settler:
    """What becomes of every task that ended (see the module's docstring)."""

    def __init__(
        self,
        registry: JobRegistry,
        dispatcher: Dispatcher,
        listeners: Listeners,
        again: Again,
        cluster: ClusterSide,
    ):
        self.registry = registry
        self.dispatcher = dispatcher
        self.listeners = listeners
        self.again = again
        self.cluster = cluster

    def settle_finished(self) -> None:
        """Settle every task the dispatcher saw end since the last call (the status
        thread)."""
        for finished in self.dispatcher.drain():
            if timing.ON:
                timing.record("reporting", finished.key, time.time())
                self.settle(finished)
                timing.record("told", finished.key, finished.ok, time.time())
            else:
                self.settle(finished)

    def tell_finished(self) -> None:
        """Only tell the listeners of the tasks that ended since the last call (at the
        run's end, when Snakemake is told nothing more)."""
        for finished in self.dispatcher.drain():
            self.tell(finished)

    def settle(self, finished: Finished) -> None:
        registry, again, cluster = self.registry, self.again, self.cluster
        record = registry.get(finished.key)
        told = record if record is not None else registry.taken(finished.key)
        if told is not None:
            self.listeners.ended(told, finished)
        on = finished.on
        state = RunState(
            registered=record is not None,
            fatal=registry.fatal is not None,
            stopping=registry.stop_reason is not None,
            on_worker_job=on is not None and cluster.from_worker_job(on.name),
            stopped_at_limit=record is not None and record.stopped_at_limit == finished.key,
        )
        routed = route(finished, state)
        if routed is Route.SUCCEEDED:
            popped = registry.pop(finished.key)
            if popped is not None:  # not claimed for a rerun meanwhile
                again.snakemake.succeeded(popped.info)
        elif routed is Route.MOVE:
            again.move(finished)
        elif routed is Route.RERUN:
            # Stopped by the plugin at its worker job's landing: its process group is gone
            # (its outcome came after it was reaped), so it runs again at once.
            cluster.later(lambda: again.rerun(finished.key, finished))
        elif routed is Route.LOST:
            assert finished.lost_on is not None
            cluster.lost(finished.key, finished.lost_on)  # stays registered
        elif routed is Route.ASK_WORKER_JOB:
            cluster.unless_worker_job_ended(finished)
        elif routed is Route.CHECK_CLUSTER:
            # Cancelled, or lost with the scheduler: its processes may still run. If the
            # cluster broke, the run's failure reports it once they are gone.
            cluster.check_cluster(force=True)
            if not registry.fatal:
                again.fail(finished)
        elif routed is Route.ASK_ALLOCATION:
            cluster.unless_allocation_ended(finished)
        elif routed is Route.FAILED:
            again.fail(finished)

    def tell(self, finished: Finished) -> None:
        """Tell the listeners how a task ended, also one whose job the run already gave
        up (taken at Ctrl-C or when the cluster broke): it ran, and the usage report
        records what it ran. Nothing else is done with it (see :meth:`settle`)."""
        record = self.registry.get(finished.key) or self.registry.taken(finished.key)
        if record is not None:
            self.listeners.ended(record, finished)
