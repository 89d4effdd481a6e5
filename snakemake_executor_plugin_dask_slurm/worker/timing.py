"""The plugin's one debug hook: timing events for the benchmark harness (benchmarks/),
off unless its environment variables are set (standard library only).

- ``DASK_SLURM_TIMING_EVENTS=<file>``: Snakemake's side. The executor and the dispatcher
  :func:`record` what happened to each job and when (``submit``, ``noticed``,
  ``reporting``, ``told``, ...; the list is in benchmarks/instrumented_snakemake.py);
  the file is written once, at exit. Call sites test :data:`ON` first, so a run without
  the variable pays one attribute read per event.
- ``DASK_SLURM_TIMING_TASKS=<directory>``: the workers' side. Each worker appends
  ``key<TAB>started<TAB>finished`` for every task to ``<dir>/<host>-<pid>.tsv``, one
  ``O_APPEND`` write per task, so a killed worker's lines are kept.
"""

from __future__ import annotations

import atexit
import os
import socket
from typing import Any

EVENTS_ENV = "DASK_SLURM_TIMING_EVENTS"
TASKS_ENV = "DASK_SLURM_TIMING_TASKS"

ON = bool(os.environ.get(EVENTS_ENV))
_events: list[tuple[Any, ...]] = []
_tasks_fd: int | None = None


def record(*event: Any) -> None:
    """Keep one event (its kind, then its fields); written to the events file at exit."""
    _events.append(event)


def _write_events() -> None:
    path = os.environ.get(EVENTS_ENV)
    if path and _events:
        with open(path, "a") as f:
            f.writelines("\t".join(map(str, event)) + "\n" for event in _events)


if ON:
    atexit.register(_write_events)


def open_task_log() -> None:
    """In a worker: start recording task times, if asked to."""
    global _tasks_fd
    directory = os.environ.get(TASKS_ENV)
    if not directory or _tasks_fd is not None:
        return
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{socket.gethostname()}-{os.getpid()}.tsv")
    _tasks_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)


def task_done(key: str, started: float, finished: float) -> None:
    if _tasks_fd is not None:  # one O_APPEND write per line: whole lines, from any thread
        os.write(_tasks_fd, f"{key}\t{started}\t{finished}\n".encode())
