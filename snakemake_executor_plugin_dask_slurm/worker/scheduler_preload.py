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
"""

from __future__ import annotations

import os
from typing import Any

#: How often the scheduler checks on its owner, in milliseconds.
CHECK_INTERVAL_MS = 1000


def owner_gone(owner: int) -> bool:
    return os.getppid() != owner


def dask_setup(scheduler: Any) -> None:
    scheduler.allowed_failures = 0
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
