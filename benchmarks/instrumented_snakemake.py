"""Run Snakemake for the benchmark harness, recording Snakemake's side of the timings.

Usage: ``python benchmarks/instrumented_snakemake.py <snakemake arguments>``. The plugin
records its own timing events through its one debug hook (``DASK_SLURM_TIMING_EVENTS``
and ``DASK_SLURM_TIMING_TASKS``, see ``snakemake_executor_plugin_dask_slurm/worker/
timing.py``); the harness sets those. This wrapper adds the one event that belongs to
Snakemake, not to the plugin, by wrapping Snakemake's own ``JobScheduler._finish_jobs``
(into the same events file, appended at exit):

``finish_jobs t_enter t_exit jobs``  Snakemake post-processed ``jobs`` finished jobs, holding
                                   its scheduler lock (which every report waits for)

The plugin's events (in the same file):

``init t``                         executor construction begins (plugin start)
``ready t slots``                  the cluster started (at the first job): every worker registered
``cluster_start seconds``          the cluster source's own ``start()`` duration
``submit key t``                   Snakemake handed the job over (just after ``run_job_pre``)
``noticed key t``                  Dask told the executor the task ended (the dispatcher's
                                   event handler, on the client's event thread)
``reporting key t``                the executor's status thread began reporting it
``told key ok t``                  Snakemake was told (report_job_success/error returned;
                                   waits for Snakemake's scheduler lock)
``shutdown t_enter t_exit``        the executor's ``shutdown()``
``cluster_close seconds``          the cluster source's own ``close()`` duration
``usage_report t_start t_end``     the usage report written (its thread, at the run's end)

With ``DASK_SLURM_BENCH_KEEP_EXIT_WAIT=1`` the executor's ``additional_general_args`` (a
public hook of Snakemake's executor interface) is the base class's: no
``--max-jobs-per-timespan 100000/0s`` for the Snakemake a general-way job starts, to
measure the exit wait that argument cuts.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

EVENTS_ENV = "DASK_SLURM_TIMING_EVENTS"
#: Set: leave Snakemake's own general args (the spawned Snakemake's exit wait stays).
KEEP_EXIT_WAIT_ENV = "DASK_SLURM_BENCH_KEEP_EXIT_WAIT"

_events: list[tuple[Any, ...]] = []


def _write_events(path: str) -> None:
    with open(path, "a") as f:
        for event in _events:
            f.write("\t".join(map(str, event)) + "\n")


def _wrap_snakemake() -> None:
    from snakemake.scheduling import job_scheduler

    scheduler: Any = job_scheduler.JobScheduler
    orig_finish_jobs: Callable[..., None] = scheduler._finish_jobs

    def _finish_jobs(self: Any) -> None:
        t, jobs = time.time(), len(self._tofinish)
        orig_finish_jobs(self)
        if jobs:
            _events.append(("finish_jobs", t, time.time(), jobs))

    scheduler._finish_jobs = _finish_jobs
    if os.environ.get(KEEP_EXIT_WAIT_ENV):  # measure what the plugin's cut saves
        from snakemake_executor_plugin_dask_slurm import executor

        cls: Any = executor.Executor
        cls.additional_general_args = executor.RemoteExecutor.additional_general_args


def main() -> None:
    path = os.environ.get(EVENTS_ENV)
    if path:
        _wrap_snakemake()
    from snakemake.cli import main as snakemake_main

    sys.argv[0] = "snakemake"
    try:
        snakemake_main()
    finally:
        if path:
            _write_events(path)


if __name__ == "__main__":
    main()
