"""A cluster source whose farm grows with worker jobs: the run's own cluster (its srun
workers, or only a scheduler in sbatch mode) plus the pool of worker jobs that add workers
to it. The cluster owns its scaling, as distributed's ``SpecCluster.adapt`` does: the
executor sees one :class:`..base.ClusterSource` and never the pool, whose parts are the
source's :attr:`..base.ClusterSource.growth` (:class:`PoolGrowth`) and
:attr:`..base.ClusterSource.clock` (:class:`PoolClock`).

What the pool changes about the source:

- **capacity**: what a worker job's workers will offer counts for admission before any
  has joined (a job larger than the first allocation's nodes is not refused);
- **no worker left** is not the end while worker jobs are queued or running, or growth may
  still submit;
- **a dead worker's jobs** are swept in its worker job (``srun --jobid``), the others
  where the inner source started them;
- **a job that failed on a worker job's worker** may have been killed together with its
  worker job (scancel, its time limit): SLURM is asked first, and such a job is lost, not
  failed;
- **stopping**: the pool's thread stops before the client closes; every worker job is
  cancelled after the inner source closed, and the pool's summary is the last word;
- **clocks**: the run's runway (worker jobs with a time limit) is the pool's, and each
  worker job lands before its limit, its jobs moved or stopped by the run's
  :class:`..base.Landings`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ...worker.clock import AllocationEnd, Runway
from ...worker.supervisor import Swept
from ..base import ClusterSource, Growth, Landings, SourceClock
from ..security import RunSecurity
from .job import State
from .pool import WorkerJobs

if TYPE_CHECKING:
    from distributed import Client

#: A job that failed on a worker job's worker: the second look at that job's state.
ENDING_RECHECK = 0.5


class GrowingCluster(ClusterSource):
    """``inner`` plus the worker jobs of ``pool``."""

    def __init__(self, inner: ClusterSource, pool: WorkerJobs):
        self.inner = inner
        self.pool = pool
        self.description = inner.description
        self.security: RunSecurity = inner.security
        self.record_dir: Path | None = inner.record_dir
        self.restarts_workers = inner.restarts_workers
        self.growth = PoolGrowth(pool)
        self.clock = PoolClock(inner.clock, pool)

    @property
    def bringup_seconds(self) -> float | None:  # for the benchmarks' timing hook
        return getattr(self.inner, "bringup_seconds", None)

    @property
    def teardown_seconds(self) -> float | None:
        return getattr(self.inner, "teardown_seconds", None)

    def launch(self, worker_env: Mapping[str, str] | None = None) -> None:
        self.inner.launch(worker_env)

    def preflight(self) -> None:
        self.inner.preflight()

    def start(self) -> Client:
        client = self.inner.start()
        self.pool.start(client)
        return client

    def close(self) -> None:
        self.pool.stop()  # before the client closes: the pool's thread uses it
        try:
            self.inner.close()
        finally:
            self.pool.close()

    def stop_workers(self) -> None:
        self.inner.stop_workers()
        self.pool.close()  # their supervisors end their jobs, SLURM the rest

    def summary(self) -> list[str]:
        return self.inner.summary()

    def warnings(self) -> list[str]:
        return self.inner.warnings()

    def problem(self) -> str | None:
        return self.inner.problem()

    def scheduler_lost(self) -> bool:
        return self.inner.scheduler_lost()

    def allocation_problem(self) -> str | None:
        return self.inner.allocation_problem()

    def deaths(self) -> list[str]:
        return self.inner.deaths()

    def sweep(self, worker: str, keys: Sequence[str]) -> Swept | None:
        """A worker job's worker: end its jobs' processes with a step in its worker job
        (nothing to do if SLURM ended that job: every process in it ended with it)."""
        if not self.pool.owns(worker):
            return self.inner.sweep(worker, keys)
        job, node = self.pool.where(worker)
        if job is None:
            return None
        self.pool.refresh()
        if job.state is State.ENDED:
            return Swept(
                f"SLURM ended worker job {job.job_id} ({job.slurm_state}) and every process in it"
            )
        if node is None:
            return None
        return self.pool.provider.sweep(job.job_id, node, list(keys))

    def end_worker(self, name: str, pid: int | None) -> str | None:
        """A silent worker of a worker job: ended with a step in that job on its node."""
        if not self.pool.owns(name):
            return self.inner.end_worker(name, pid)
        job, node = self.pool.where(name)
        if pid is None or job is None or node is None or job.state is State.ENDED:
            return None
        return self.pool.provider.end_worker(job.job_id, node, pid)

    def closing_lines(self) -> list[str]:
        line = self.pool.summary()
        return [*self.inner.closing_lines(), *([line] if line else [])]


class PoolGrowth(Growth):
    """The run's growth: what the pool's worker jobs will offer, and may still bring."""

    def __init__(self, pool: WorkerJobs):
        self.pool = pool

    def future_offers(self) -> list[dict[str, float]]:
        return self.pool.provider.offers()

    def workers_may_come(self) -> bool:
        return self.pool.active()

    def from_worker_job(self, worker: str) -> bool:
        return self.pool.owns(worker)

    def lost_with_its_job(self, worker: str, noticed: float) -> bool:
        """Whether the worker job of ``worker`` has ended or is ending, as SLURM tells it
        after ``noticed`` (when a job's failure was noticed). SLURM changes a job's state
        before it signals its processes, so a job killed with it sees this; one more
        look half a second later covers a failure that raced the change. Failures noticed
        together share the same squeue calls."""
        job = self.pool.where(worker)[0] if self.pool.owns(worker) else None
        if job is None:
            return False
        for after in (noticed, noticed + ENDING_RECHECK):
            time.sleep(max(0.0, after - time.time()))
            self.pool.refresh(after)
            if job.state is State.ENDED or job.slurm_state != "RUNNING":
                return True
        return False


class PoolClock(SourceClock):
    """The run's own workers' end is the inner source's (``inner``); the runway is the
    pool's, and its worker jobs land."""

    def __init__(self, inner: SourceClock | None, pool: WorkerJobs):
        self.inner = inner
        self.pool = pool

    def allocation_end(self) -> AllocationEnd | None:
        return self.inner.allocation_end() if self.inner is not None else None

    def runway(self) -> Runway | None:
        return self.pool.lander.runway

    def land_worker_jobs_with(self, landings: Landings) -> bool:
        self.pool.lander.landings = landings
        return True
