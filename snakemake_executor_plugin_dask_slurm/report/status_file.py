"""The run's status file, ``<run dir>/status.json``, and its progress line (standard
library only: the status command reads it on a login node without Snakemake or Dask).

The run replaces the file every few seconds (:func:`write_status`: a file in the same
directory, fsynced, then ``os.replace``; mode 0600, like the run's other files) and once
more at its end with how it ended. Who wrote it is named by host, pid and the pid's start
time (``/proc/<pid>/stat``), so that a reader on the same host can tell a live run from a
pid reused by another process (:func:`same_process`).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: In the run directory (``.snakemake/dask-slurm/`` by default).
STATUS_NAME = "status.json"
#: Seconds between two writes of the file while the run runs.
FILE_EVERY = 5.0
#: What ``state`` says: running; at the end how it ended.
RUNNING, SUCCESS, FAILED, INTERRUPTED = "running", "success", "failed", "interrupted"


def write_status(path: Path, data: Mapping[str, Any]) -> None:
    """Replace ``path`` with ``data`` as JSON, atomically, readable by its owner only."""
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as out:  # mkstemp's file is 0600 already
            json.dump(data, out, indent=1, sort_keys=True)
            out.write("\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def read_status(path: Path) -> dict[str, Any] | None:
    """The file's figures, or None where there is no file (or not a whole one)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def process_start(pid: int, proc: Path = Path("/proc")) -> int | None:
    """When ``pid`` started, in clock ticks since boot (``/proc/<pid>/stat``'s 22nd field),
    or None if there is no such process here."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # after the command, which may hold spaces
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def same_process(pid: int, started: int | None, proc: Path = Path("/proc")) -> bool:
    """Whether ``pid`` is still the process that started at ``started`` (on this host)."""
    now = process_start(pid, proc)
    return now is not None and (started is None or now == started)


def _count(value: Any) -> str:
    return "?" if value is None else str(value)


def _rate(data: Mapping[str, Any]) -> str:
    rate = data.get("rate_per_minute")
    return "" if rate is None else f"; {rate:.1f} jobs/min"


def _eta(data: Mapping[str, Any]) -> str:
    left = data.get("eta_seconds")
    jobs = data.get("jobs", {})
    if left is None or jobs.get("done") == jobs.get("total"):
        return ""
    fits = data.get("fits_before_landing")
    fit = "" if fits is None else (", fits before landing" if fits else ", NOT before landing")
    return f"; end in ~{_duration(left)}{fit}"


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    if seconds >= 60:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds} s"


def progress_line(data: Mapping[str, Any]) -> str:
    """The progress in one line: jobs, rate, end, workers, how busy."""
    jobs = data.get("jobs", {})
    workers = data.get("workers", {})
    busy = workers.get("busy_share")
    share = "" if busy is None else f", {busy:.0%} of {workers.get('slots', 0)} slots busy"
    worker_jobs = workers.get("worker_jobs")
    wj = "" if worker_jobs is None else f" in {worker_jobs} worker job(s)"
    return (
        f"{_count(jobs.get('done'))} of {_count(jobs.get('total'))} jobs done, "
        f"{_count(jobs.get('running'))} running, {_count(jobs.get('waiting'))} waiting, "
        f"{jobs.get('failed', 0)} failed, {jobs.get('lost', 0)} lost"
        f"{_rate(data)}{_eta(data)}; {_count(workers.get('alive'))} worker(s){wj}{share}"
    )
