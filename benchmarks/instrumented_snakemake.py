"""Run Snakemake with timestamps recorded around the dask-slurm executor (benchmark only).

Usage: ``python benchmarks/instrumented_snakemake.py <snakemake arguments>``, with
``DASK_SLURM_BENCH_EVENTS=<file>`` in the environment. Without that variable this is
plain Snakemake.

The plugin records no timings itself, so this wrapper patches a few of its methods in
this process, before Snakemake loads the plugin (the same module objects, so the same
classes). Each hook appends one tuple to a list (a ``time.time()`` call and an append,
about a microsecond); the list is written out once, when Snakemake exits. The workers'
side (when each task started and finished) is recorded by ``worker_timestamps.py``, a
worker preload; all nodes of the test cluster share this machine's clock.

With ``DASK_SLURM_BENCH_KEEP_EXIT_WAIT=1`` the executor's ``additional_general_args`` is
the base class's (no ``--max-jobs-per-timespan 100000/0s`` for the Snakemake a general-way
job starts), to measure the exit wait that argument cuts.

Lines written (tab-separated):

``init t``                         executor construction begins (plugin start)
``ready t slots``                  the cluster started (at the first job): every worker registered
``cluster_start seconds``          the cluster source's own ``start()`` duration
``submit key t``                   Snakemake handed the job over (``run_job_pre``, called for
                                   each job of a round just before it is submitted)
``noticed key t``                  Dask told the executor the task ended (the dispatcher's
                                   event handler ran, on the client's event thread)
``reporting key t``                the executor's status thread began reporting it (``_report``)
``told key ok t``                  Snakemake was told (report_job_success/error returned;
                                   waits for Snakemake's scheduler lock)
``finish_jobs t_enter t_exit jobs``  Snakemake post-processed ``jobs`` finished jobs, holding
                                   its scheduler lock (which every report waits for)
``shutdown t_enter t_exit``        the executor's ``shutdown()``
``cluster_close seconds``          the cluster source's own ``close()`` duration
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

EVENTS_ENV = "DASK_SLURM_BENCH_EVENTS"
#: Set: leave Snakemake's own general args (the spawned Snakemake's exit wait stays).
KEEP_EXIT_WAIT_ENV = "DASK_SLURM_BENCH_KEEP_EXIT_WAIT"

_events: list[tuple[Any, ...]] = []


def _write_events(path: str) -> None:
    with open(path, "w") as f:
        for event in _events:
            f.write("\t".join(map(str, event)) + "\n")


def _patch_executor() -> None:
    from snakemake_executor_plugin_dask_slurm import executor
    from snakemake_executor_plugin_dask_slurm.clusters import base as cluster
    from snakemake_executor_plugin_dask_slurm.dispatch import dispatcher as dispatch

    cls: Any = executor.Executor
    record = _events.append
    now = time.time
    orig_init: Callable[..., None] = cls.__init__
    orig_ensure_cluster: Callable[..., None] = cls._ensure_cluster
    orig_run_job_pre: Callable[..., None] = cls.run_job_pre
    orig_report: Callable[..., None] = cls._report
    orig_shutdown: Callable[..., None] = cls.shutdown

    def __init__(self: Any, workflow: Any, logger: Any) -> None:
        record(("init", now()))
        orig_init(self, workflow, logger)

    def _ensure_cluster(self: Any) -> None:
        starting = self._dispatcher is None
        orig_ensure_cluster(self)
        if starting and self._source is not None:
            t = now()
            workers = self._source.client.scheduler_info(n_workers=-1)["workers"].values()
            record(("ready", t, sum(w["nthreads"] for w in workers)))

    def run_job_pre(self: Any, job: Any) -> None:
        record(("submit", self.job_key(job), now()))
        orig_run_job_pre(self, job)

    def _report(self: Any, finished: Any) -> None:
        record(("reporting", finished.key, now()))
        orig_report(self, finished)
        record(("told", finished.key, finished.ok, now()))

    def shutdown(self: Any) -> None:
        t = now()
        orig_shutdown(self)
        record(("shutdown", t, now()))

    cls.__init__, cls._ensure_cluster, cls.run_job_pre = __init__, _ensure_cluster, run_job_pre
    if os.environ.get(KEEP_EXIT_WAIT_ENV):  # measure what the plugin's cut saves
        cls.additional_general_args = executor.RemoteExecutor.additional_general_args
    cls._report, cls.shutdown = _report, shutdown

    dispatcher: Any = dispatch.Dispatcher
    orig_finish: Callable[..., None] = dispatcher._finish

    def _finish(self: Any, finished: Any) -> None:
        record(("noticed", finished.key, now()))
        orig_finish(self, finished)

    dispatcher._finish = _finish

    from snakemake.scheduling import job_scheduler

    scheduler: Any = job_scheduler.JobScheduler
    orig_finish_jobs: Callable[..., None] = scheduler._finish_jobs

    def _finish_jobs(self: Any) -> None:
        t, jobs = now(), len(self._tofinish)
        orig_finish_jobs(self)
        if jobs:
            record(("finish_jobs", t, now(), jobs))

    scheduler._finish_jobs = _finish_jobs

    pc: Any = cluster.ProcessCluster
    orig_start: Callable[..., Any] = pc.start
    orig_close: Callable[..., None] = pc.close

    def start(self: Any) -> Any:
        t = time.monotonic()
        client = orig_start(self)
        record(("cluster_start", time.monotonic() - t))
        return client

    def close(self: Any) -> None:
        t = time.monotonic()
        orig_close(self)
        record(("cluster_close", time.monotonic() - t))

    pc.start, pc.close = start, close


def main() -> None:
    path = os.environ.get(EVENTS_ENV)
    if path:
        _patch_executor()
    from snakemake.cli import main as snakemake_main

    sys.argv[0] = "snakemake"
    try:
        snakemake_main()
    finally:
        if path:
            _write_events(path)


if __name__ == "__main__":
    main()
