"""What runs on a Dask worker: one job's command, in its own process group, logged.

This module is imported by every worker (it is also the workers' ``--preload`` module, so
that ``dask_teardown`` kills whatever jobs are still running when a worker closes).
Cancelling a Dask future does not stop a running task, so the plugin keeps every running
command's process here, by task key, and kills the whole process group itself.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any

#: Seconds between SIGTERM and SIGKILL when a job is stopped.
KILL_GRACE_SECONDS = 3.0
#: How much of a failed job's log comes back with its outcome.
TAIL_LINES = 20
_TAIL_BYTES = 16384
_TMPDIR_VARS = ("TMPDIR", "TMP", "TEMP", "TEMPDIR")

_running: dict[str, subprocess.Popen[bytes]] = {}
_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """One job, as the worker runs it."""

    key: str
    argv: tuple[str, ...]
    cwd: str
    env: tuple[tuple[str, str], ...]
    log_path: str
    #: Point TMPDIR and friends at the worker's temporary directory, as Snakemake's
    #: ``shell()`` does with the job's ``resources.tmpdir``.
    set_tmpdir: bool


@dataclass(frozen=True, slots=True)
class TaskOutcome:
    """How the job ended, as reported back to Snakemake."""

    returncode: int  # negative: killed by that signal
    host: str
    started: float
    finished: float
    tail: str  # the end of the job's log when it failed, else ""
    start_error: str | None = None  # the command could not be started at all


class JobFailed(Exception):
    """Raised on the worker when a job did not succeed.

    The outcome then travels with the task's error, which Dask sends to the client with
    the task's state anyway; a successful job's result is never fetched at all. So the
    thousands of jobs that succeed cost no extra round trip to the worker.
    """

    def __init__(self, outcome: TaskOutcome):
        super().__init__(outcome)
        self.outcome = outcome

    def __str__(self) -> str:
        return f"job exited with code {self.outcome.returncode} on {self.outcome.host}"


def _environment(spec: TaskSpec) -> dict[str, str]:
    env = dict(os.environ)
    env.update(spec.env)
    if spec.set_tmpdir:
        tmp = tempfile.gettempdir()
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


def run_task(spec: TaskSpec) -> TaskOutcome:
    """Run one job's command to completion (called by Dask on a worker thread).

    Raises :class:`JobFailed` if it did not succeed.
    """
    started = time.time()
    host = socket.gethostname()
    try:
        os.makedirs(os.path.dirname(spec.log_path), exist_ok=True)
        with open(spec.log_path, "wb") as log:
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


def kill_tasks(keys: list[str] | None = None, grace: float = KILL_GRACE_SECONDS) -> list[str]:
    """Stop the process groups of the given running tasks (all if ``keys`` is None).

    Sends SIGTERM now and SIGKILL after ``grace`` seconds, without blocking the caller
    (this runs on the worker's event loop via ``Client.run``). Returns the keys signalled.
    """
    with _lock:
        chosen = {k: p for k, p in _running.items() if keys is None or k in keys}
    for proc in chosen.values():
        _signal_group(proc, signal.SIGTERM)
    if chosen:
        timer = threading.Timer(grace, _kill_later, args=(list(chosen.values()),))
        timer.daemon = True
        timer.start()
    return sorted(chosen)


def running_tasks() -> list[str]:
    """Keys of the tasks whose commands are running on this worker."""
    with _lock:
        return sorted(_running)


def dask_teardown(worker: Any) -> None:
    """Worker preload hook: a closing worker takes its jobs' processes with it."""
    with _lock:
        procs = list(_running.values())
    for proc in procs:
        _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + KILL_GRACE_SECONDS
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(0.05)
    _kill_later(procs)
