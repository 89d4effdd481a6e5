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

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ...worker.clock import AllocationEnd, Runway
from ...worker.supervisor import Swept
from ..base import ClusterSource, Growth, Landings, SourceClock
from ..security import RunSecurity
from .pool import WorkerJobs

if TYPE_CHECKING:
    from distributed import Client


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

    def launch(self) -> None:
        self.inner.launch()

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
        if self.pool.owns(worker):
            return self.pool.sweep(worker, list(keys))
        return self.inner.sweep(worker, keys)

    def end_worker(self, name: str, pid: int | None) -> str | None:
        if self.pool.owns(name):
            return self.pool.end_worker(name, pid) if pid is not None else None
        return self.inner.end_worker(name, pid)

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
        return self.pool.owns(worker) and self.pool.ending(worker, noticed)


class PoolClock(SourceClock):
    """The run's own workers' end is the inner source's (``inner``); the runway is the
    pool's, and its worker jobs land."""

    def __init__(self, inner: SourceClock | None, pool: WorkerJobs):
        self.inner = inner
        self.pool = pool

    def allocation_end(self) -> AllocationEnd | None:
        return self.inner.allocation_end() if self.inner is not None else None

    def runway(self) -> Runway | None:
        return self.pool.runway

    def land_worker_jobs_with(self, landings: Landings) -> bool:
        self.pool.lander.landings = landings
        return True
