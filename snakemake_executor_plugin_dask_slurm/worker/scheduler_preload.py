"""Scheduler ``--preload`` module: the plugin's rules for its own scheduler.

- **Dask never runs a job twice on its own.** A task whose worker died is failed
  (``KilledWorker``) instead of being handed to another worker: the job's processes may
  still be writing its outputs until the worker's supervisor has ended them, and only
  the plugin, once it knows they are gone, decides whether the job runs again
  (``allowed_failures = 0``, whatever the user's Dask configuration says).
- **The scheduler exits when the Snakemake that owns it dies.** The plugin stops its
  scheduler in order when the workflow ends, fails or is interrupted; this covers the one
  case it cannot: the Snakemake process itself killed outright (SIGKILL, a crashed
  interpreter). The owner's PID comes in ``DASK_SLURM_OWNER_PID``; once this process's
  parent is no longer that PID, the scheduler closes, and its workers follow.
- **Teardown closes every worker at once** (the ``dask_slurm_close_workers`` handler).
  Dask's ``retire_workers`` first moves a worker's task results elsewhere and refuses to
  retire the last worker while it holds any (results of the last jobs, not yet released):
  the plugin needs none of them, so it asks each worker to close, and each exits by itself.
"""

from __future__ import annotations

import os
from typing import Any

#: How often the scheduler checks on its owner, in milliseconds.
CHECK_INTERVAL_MS = 1000


def owner_gone(owner: int) -> bool:
    return os.getppid() != owner


#: The scheduler RPC the plugin's teardown calls.
CLOSE_WORKERS_HANDLER = "dask_slurm_close_workers"


def close_workers(scheduler: Any) -> list[str]:
    """Ask every worker to close now; the addresses asked."""
    workers = list(scheduler.workers)
    for address in workers:
        scheduler.close_worker(address)
    return workers


def dask_setup(scheduler: Any) -> None:
    scheduler.allowed_failures = 0
    scheduler.handlers[CLOSE_WORKERS_HANDLER] = lambda: close_workers(scheduler)
    owner = os.environ.get("DASK_SLURM_OWNER_PID")
    if not owner:
        return
    from tornado.ioloop import PeriodicCallback

    def check() -> None:
        if owner_gone(int(owner)):
            callback.stop()
            scheduler.loop.add_callback(scheduler.close)

    callback = PeriodicCallback(check, CHECK_INTERVAL_MS)
    callback.start()
