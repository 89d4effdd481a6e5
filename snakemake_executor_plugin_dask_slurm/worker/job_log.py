"""A job's log, created only when the job prints or fails (standard library only).

A job run the direct way writes its stdout and stderr into one pipe, which the worker
thread that waits for the job anyway copies into the log as it comes: the log grows while
the job runs (partial output survives a lost worker), and a job that succeeds without
printing leaves no file. On a parallel filesystem every create is a metadata operation the
site counts; a farm of 100,000 silent jobs would otherwise leave 100,000 empty files in one
directory. A failed job always has its log (empty if it printed nothing), since its error
message names it.
"""

from __future__ import annotations

import contextlib
import os
import resource
import select
import threading
import time
from typing import IO, Any

from .logtail import read_tail

#: Without pidfds only: seconds between looks at a job's shell while its output is quiet
#: (or while it keeps flowing): once the shell has exited, whatever it left in the
#: background may hold the output open, and the job ends all the same.
OUTPUT_POLL_SECONDS = 0.1
_CHUNK = 1 << 16

#: Log directories this process already created (one mkdir per directory, not per job).
_made_dirs: set[str] = set()


def make_log_dir(path: str) -> None:
    directory = os.path.dirname(path)
    if directory not in _made_dirs:
        os.makedirs(directory, exist_ok=True)
        _made_dirs.add(directory)


class JobLog:
    """A job's log file, created at the job's first byte, or when it ends if it failed
    (``append``: added to what is there, for a job run again in place).

    If the file cannot be written, the job's output is read and dropped (a job must never
    block on a full pipe) and a failed job's tail says why its log is short.
    """

    def __init__(self, path: str, append: bool = False) -> None:
        self.path = path
        self._mode = "ab" if append else "wb"
        self._file: IO[Any] | None = None
        self.error: str | None = None

    def write(self, data: bytes) -> None:
        if self.error is not None:
            return
        try:
            file = self._file
            if file is None:
                make_log_dir(self.path)
                file = self._file = open(self.path, self._mode)  # noqa: SIM115 (see close)
            file.write(data)
            file.flush()  # the log grows as the job runs
        except OSError as e:
            self.error = f"{type(e).__name__}: {e}"

    def close(self, keep: bool) -> None:
        """Close the file; ``keep``: create it even if the job printed nothing."""
        if self._file is None and keep and self.error is None:
            self.write(b"")
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None

    def tail(self, lines: int) -> str:
        tail = read_tail(self.path, lines)
        if self.error is None:
            return tail
        lost = f"(its log {self.path} could not be written: {self.error})"
        return f"{tail}\n{lost}" if tail else lost


def keep_log(path: str) -> None:
    """Make sure a failed job's log exists (its failure message names it), e.g. for a job
    that printed nothing before its worker was lost; a written one is kept as it is."""
    with contextlib.suppress(OSError):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "ab"):
            pass


def _exited(pid: int) -> bool:
    """Whether the process ``pid`` has exited, without reaping it (its waiter then gets
    its status and resource usage from ``os.wait4``)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped already
        return True


#: What :func:`_open_pidfd` says of a child that is gone already.
_GONE = -1
#: The pidfds this process holds now (one per job whose output is being copied).
_pidfds = 0
_pidfds_lock = threading.Lock()


def _pidfd_budget() -> int:
    """How many pidfds this process may hold: a quarter of its open-file limit, so that
    they never take the descriptors a job's own pipe needs (a soft limit of 1,024 is
    common); the jobs beyond it are looked at every ``OUTPUT_POLL_SECONDS``, as before."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 1 << 20 if soft == resource.RLIM_INFINITY else soft // 4


def _open_pidfd(pid: int) -> int | None:
    """A pidfd of this process's child ``pid`` (readable once it has exited), ``_GONE`` if
    it was reaped already, None where the kernel or Python has no pidfds (Linux < 5.3) or
    this process holds its budget of them. Give it back with :func:`_close_pidfd`."""
    global _pidfds
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    with _pidfds_lock:
        if _pidfds >= _pidfd_budget():
            return None
        _pidfds += 1
    pidfd = _checked_pidfd(opener, pid)
    if pidfd is None or pidfd == _GONE:
        with _pidfds_lock:
            _pidfds -= 1
    return pidfd


def _close_pidfd(pidfd: int) -> None:
    global _pidfds
    os.close(pidfd)
    with _pidfds_lock:
        _pidfds -= 1


def _checked_pidfd(opener: Any, pid: int) -> int | None:
    try:
        pidfd: int = opener(pid)
    except ProcessLookupError:
        return _GONE
    except OSError:  # ENOSYS, EMFILE, or a sandbox that forbids it
        return None
    try:  # reaped and the pid reused before it was opened: not our child then
        os.waitid(os.P_PIDFD, pidfd, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        os.close(pidfd)
        return _GONE
    except OSError:
        os.close(pidfd)
        return None
    return pidfd


def copy_output(pid: int, output: IO[bytes], log: JobLog) -> None:
    """Copy the output of the job whose shell is ``pid`` into its log as it comes, until
    the output ends, or until the shell has exited while something it left in the
    background holds the output open (the caller then ends that with the job's process
    group, as for any job).

    The thread sleeps in one ``poll`` on the output and on a pidfd of the shell, which
    wakes it only when the job prints or its shell exits: a job that runs quietly costs
    nothing. Without pidfds, it looks at the shell every ``OUTPUT_POLL_SECONDS``."""
    pidfd = _open_pidfd(pid)
    if pidfd == _GONE:
        return
    if pidfd is None:
        _copy_looking(pid, output, log)
        return
    fd = output.fileno()
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    poller.register(pidfd, select.POLLIN)
    try:
        while True:
            ready = [ready_fd for ready_fd, _ in poller.poll()]
            if pidfd in ready:  # what it printed last: drain() after the reap
                return
            data = os.read(fd, _CHUNK)
            if not data:
                return
            log.write(data)
    finally:
        _close_pidfd(pidfd)


def _copy_looking(pid: int, output: IO[bytes], log: JobLog) -> None:
    """:func:`copy_output` without pidfds: a look at the shell while the output is quiet,
    and every ``OUTPUT_POLL_SECONDS`` while it flows."""
    fd = output.fileno()
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    timeout = int(OUTPUT_POLL_SECONDS * 1000)
    look_at = time.monotonic() + OUTPUT_POLL_SECONDS
    while True:
        if poller.poll(timeout):
            data = os.read(fd, _CHUNK)
            if not data:
                return
            log.write(data)
            if time.monotonic() < look_at:
                continue
        look_at = time.monotonic() + OUTPUT_POLL_SECONDS
        if _exited(pid):
            return


def drain(output: IO[bytes] | None, log: JobLog) -> None:
    """What is left in the job's output, without waiting for a writer still alive (a
    daemon in a session of its own: the orphan scan ends it); then the pipe is closed."""
    if output is None or output.closed:
        return
    fd = output.fileno()
    os.set_blocking(fd, False)
    with contextlib.suppress(BlockingIOError, OSError):
        while data := os.read(fd, _CHUNK):
            log.write(data)
    output.close()
