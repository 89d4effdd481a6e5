"""Dask worker preload (benchmark only): record when each job's task starts and ends.

The harness passes ``--dask-slurm-worker-args "--preload <this file>"`` and sets
``DASK_SLURM_BENCH_WORKER_DIR``; every worker then writes ``<dir>/<host>-<pid>.tsv``
with one ``key<TAB>started<TAB>finished`` line per task, written as the task returns
(wall-clock ``time.time()``; all nodes of the test cluster share this machine's clock).
Writing at once rather than at exit keeps the records of a worker that is killed.

It wraps the plugin's ``worker_task.run_task`` in this worker process: the client sends
that function by reference (module and name), so the worker runs whatever the module
holds. The wrapper adds two ``time.time()`` calls and one small ``write`` per task.
``started`` is taken before the job's command is spawned and ``finished`` after it
exited, as the plugin's own ``TaskOutcome`` does.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

from snakemake_executor_plugin_dask_slurm.worker import task as worker_task

DIR_ENV = "DASK_SLURM_BENCH_WORKER_DIR"

_original = worker_task.run_task
_fd: int | None = None


def run_task(spec: Any) -> Any:
    started = time.time()
    try:
        return _original(spec)
    finally:
        if _fd is not None:  # one O_APPEND write per line: whole lines, from any thread
            os.write(_fd, f"{spec.key}\t{started}\t{time.time()}\n".encode())


def dask_setup(worker: Any) -> None:
    global _fd
    directory = os.environ.get(DIR_ENV)
    if not directory or _fd is not None:
        return
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{socket.gethostname()}-{os.getpid()}.tsv")
    _fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    worker_task.run_task = run_task
