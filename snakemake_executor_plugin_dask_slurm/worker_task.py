"""What runs on a Dask worker: one job's command, in its own process group, logged.

This module is imported by every worker (it is also the workers' ``--preload`` module, so
that ``dask_teardown`` kills whatever jobs are still running when a worker closes).
Cancelling a Dask future does not stop a running task, so the plugin keeps every running
command's process here, by task key, and kills the whole process group itself.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from typing import Any

from .tasks import SYSTEM_TMPDIR, JobFailed, TaskOutcome, TaskSpec

#: Seconds between SIGTERM and SIGKILL when a job is stopped.
KILL_GRACE_SECONDS = 3.0
#: Shorter at interpreter exit: the worker is already going (SIGKILL may follow).
EXIT_GRACE_SECONDS = 1.0
#: How much of a failed job's log comes back with its outcome.
TAIL_LINES = 20
_TAIL_BYTES = 16384
_TMPDIR_VARS = ("TMPDIR", "TMP", "TEMP", "TEMPDIR")

_running: dict[str, subprocess.Popen[bytes]] = {}
#: Keys of jobs that were stopped: one that has not started yet must never start.
_stopped: set[str] = set()
_lock = threading.Lock()
#: Log directories this worker already created (one mkdir per directory, not per job).
_made_dirs: set[str] = set()


def _environment(spec: TaskSpec) -> dict[str, str]:
    env = dict(os.environ)
    env.update(spec.env)
    if spec.tmpdir is not None:
        tmp = tempfile.gettempdir() if spec.tmpdir == SYSTEM_TMPDIR else spec.tmpdir
        os.makedirs(tmp, exist_ok=True)  # as Snakemake's job preparation does
        for name in _TMPDIR_VARS:
            env[name] = tmp
    return env


def read_tail(path: str, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of ``path``, or "" if it cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - _TAIL_BYTES))
            data = f.read()
    except OSError:
        return ""
    return "\n".join(data.decode(errors="replace").splitlines()[-lines:])


def _open_log(path: str) -> Any:
    directory = os.path.dirname(path)
    if directory not in _made_dirs:
        os.makedirs(directory, exist_ok=True)
        _made_dirs.add(directory)
    return open(path, "wb")


def _start(spec: TaskSpec, host: str, started: float) -> subprocess.Popen[bytes]:
    with _lock:
        stopped = spec.key in _stopped
    if stopped:
        stop = "it was stopped before it started"
        raise JobFailed(TaskOutcome(-1, host, started, started, "", stop))
    try:
        with _open_log(spec.log_path) as log:
            proc = subprocess.Popen(
                spec.argv,
                cwd=spec.cwd,
                env=_environment(spec),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Its own process group, for kill_tasks; but the worker's session, so
                # that if the worker itself is killed outright, whoever started it can
                # still find and end the job by session id.
                process_group=0,
            )
    except OSError as e:
        error = f"{type(e).__name__}: {e}"
        raise JobFailed(TaskOutcome(-1, host, started, time.time(), "", error)) from None
    with _lock:
        _running[spec.key] = proc
        stopped = spec.key in _stopped  # stopped while it was being started
    if stopped:
        _signal_group(proc, signal.SIGTERM)
    return proc


def run_task(spec: TaskSpec) -> TaskOutcome:
    """Run one job's command to completion (called by Dask on a worker thread).

    Raises :class:`JobFailed` if it did not succeed.
    """
    started = time.time()
    host = socket.gethostname()
    proc = _start(spec, host, started)
    try:
        returncode = proc.wait()
    finally:
        with _lock:
            _running.pop(spec.key, None)
    if returncode:
        outcome = TaskOutcome(returncode, host, started, time.time(), read_tail(spec.log_path))
        raise JobFailed(outcome)
    return TaskOutcome(0, host, started, time.time(), "")


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _kill_later(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            _signal_group(proc, signal.SIGKILL)
        # The group may outlive its leader (a background child): finish it too.
        _signal_group(proc, signal.SIGKILL)


def kill_tasks(keys: list[str], grace: float = KILL_GRACE_SECONDS) -> list[str]:
    """Stop the given tasks: running ones now, and those not started yet when they start.

    Sends SIGTERM to the running process groups now and SIGKILL after ``grace`` seconds,
    without blocking the caller (this runs on the worker's event loop via
    ``Client.run``). Returns the keys that were running.
    """
    with _lock:
        _stopped.update(keys)
        chosen = [p for k, p in _running.items() if k in _stopped]
        running = sorted(k for k in _running if k in _stopped)
    for proc in chosen:
        _signal_group(proc, signal.SIGTERM)
    if chosen:
        timer = threading.Timer(grace, _kill_later, args=(chosen,))
        timer.daemon = True
        timer.start()
    return running


def running_tasks() -> list[str]:
    """Keys of the tasks whose commands are running on this worker."""
    with _lock:
        return sorted(_running)


def dask_teardown(worker: Any) -> None:
    """Worker preload hook: a closing worker takes its jobs' processes with it."""
    _end_running_jobs(KILL_GRACE_SECONDS)


def _end_running_jobs(grace: float) -> None:
    """SIGTERM every running job's process group, SIGKILL what is left after ``grace``."""
    with _lock:
        procs = list(_running.values())
    for proc in procs:
        _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(0.05)
    _kill_later(procs)


@atexit.register
def _end_jobs_at_exit() -> None:
    """A worker exiting without its teardown must not leave its jobs running.

    That happens when a signal cuts the worker's close short (SLURM's SIGTERM arriving
    while the worker closes). Its jobs would be reparented to init, where SLURM's
    proctrack/linuxproc or pgid no longer sees them (a cgroup would), and run on.
    Worker threads are daemons, so interpreter exit does not wait for them.
    """
    _end_running_jobs(EXIT_GRACE_SECONDS)
