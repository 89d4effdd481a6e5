"""Find and end the processes a job left behind (Linux ``/proc``; standard library only).

Runs on the workers (and in the supervisor that starts each worker). Every job's processes
carry ``DASK_SLURM_JOB=<task key>`` in their environment, which survives ``setsid``,
``nohup`` and double forks; and the worker and its supervisor are *child subreapers*
(``prctl(PR_SET_CHILD_SUBREAPER)``), so a process whose parent exits is re-parented to the
nearest of them instead of to init. Together these let a worker end the daemons of a
finished job, and a supervisor end everything a dead worker's jobs left running.

Outside Linux (a laptop running macOS) ``/proc`` and subreapers do not exist: everything
here then finds nothing and returns, and jobs are ended by process group only.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import signal
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .waiting import Deadline

#: The environment variable that marks every process of a job with the job's task key.
JOB_MARKER = "DASK_SLURM_JOB"
_MARKER_BYTES = JOB_MARKER.encode() + b"="
_PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True, slots=True)
class ProcStat:
    """One process as ``/proc/<pid>/stat`` describes it."""

    pid: int
    ppid: int
    state: str  # "Z": a zombie, waiting to be reaped
    pgid: int
    sid: int

    @property
    def alive(self) -> bool:
        return self.state not in ("Z", "X")


def parse_stat(pid: int, data: bytes) -> ProcStat | None:
    """One ``/proc/<pid>/stat`` line (the command name may hold spaces and parentheses)."""
    try:
        fields = data.rsplit(b")", 1)[1].split()
        return ProcStat(pid, int(fields[1]), fields[0].decode(), int(fields[2]), int(fields[3]))
    except (IndexError, ValueError):
        return None


def scan() -> dict[int, ProcStat]:
    """Every process this process can see, by pid (empty without ``/proc``)."""
    table: dict[int, ProcStat] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return table
    for entry in entries:
        if not entry.isdigit():
            continue
        try:  # (os.open: a third of open()'s cost, and a scan reads every process)
            fd = os.open(f"/proc/{entry}/stat", os.O_RDONLY)
            try:
                data = os.read(fd, 1024)
            finally:
                os.close(fd)
        except OSError:  # gone meanwhile
            continue
        proc = parse_stat(int(entry), data)
        if proc is not None:
            table[proc.pid] = proc
    return table


def session_members(sid: int) -> list[int]:
    """Live processes of session ``sid``."""
    return [p.pid for p in scan().values() if p.sid == sid and p.alive]


def children_of(pid: int, table: Mapping[int, ProcStat]) -> list[int]:
    return [p.pid for p in table.values() if p.ppid == pid]


def own_children() -> set[int] | None:
    """This process's children, from each of its threads' ``children`` file: without
    reading every process of the machine (on a node shared with many jobs, or the test
    cluster's one ``/proc``, a scan reads thousands). None where the kernel has no such
    file. A child re-parented while it is read may be missed: callers look again later."""
    if not os.path.exists(f"/proc/self/task/{os.getpid()}/children"):
        return None
    try:
        threads = os.listdir("/proc/self/task")
    except OSError:
        return None
    found: set[int] = set()
    for tid in threads:
        try:
            with open(f"/proc/self/task/{tid}/children", "rb") as f:
                found.update(int(pid) for pid in f.read().split())
        except OSError:  # a thread that ended meanwhile
            continue
    return found


def descendants(roots: Iterable[int], table: Mapping[int, ProcStat]) -> list[int]:
    """``roots`` and everything below them, parents before children."""
    by_parent: dict[int, list[int]] = {}
    for proc in table.values():
        by_parent.setdefault(proc.ppid, []).append(proc.pid)
    found: list[int] = []
    todo = [pid for pid in roots if pid in table]
    seen = set(todo)
    while todo:
        pid = todo.pop()
        found.append(pid)
        for child in by_parent.get(pid, ()):
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return found


def job_marker(pid: int) -> str | None:
    """The job key in a process's environment, or None (no marker, or not readable)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read()
    except OSError:
        return None
    for item in data.split(b"\0"):
        if item.startswith(_MARKER_BYTES):
            return item[len(_MARKER_BYTES) :].decode(errors="replace")
    return None


def processes_of_jobs(keys: Iterable[str], table: Mapping[int, ProcStat]) -> dict[int, str]:
    """Live processes whose marker names one of ``keys``: pid -> key."""
    wanted = set(keys)
    found = {}
    for proc in table.values():
        if proc.alive and proc.pid != os.getpid():
            key = job_marker(proc.pid)
            if key is not None and key in wanted:
                found[proc.pid] = key
    return found


def become_subreaper() -> bool:
    """Make this process adopt its orphaned descendants; False where that is impossible."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):  # not Linux
        return False


def signal_group(pgid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to process group ``pgid``, if it still has members we may signal
    (never to group 0 or 1: ``killpg(0)`` is the caller's own group)."""
    if pgid <= 1:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def send(pids: Iterable[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def reap(pids: Iterable[int]) -> None:
    """Collect the exit status of those of ``pids`` that are our exited children."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


def kill_all_below(root: int, keep: Iterable[int] = (), timeout: float = 5.0) -> int:
    """SIGKILL every descendant of ``root`` except ``keep`` (and theirs), until none is
    left or ``timeout`` passed; reaps those that became ``root``'s children when ``root``
    is this process. Returns how many processes were killed."""
    kept = set(keep)
    killed: set[int] = set()
    deadline = Deadline(timeout)
    while True:
        table = scan()
        below = [p for p in descendants(children_of(root, table), table) if p not in kept]
        kept_tree = set(descendants(kept, table))
        victims = [p for p in below if p not in kept_tree]
        live = [p for p in victims if table[p].alive]
        if root == os.getpid():
            reap(p for p in victims if not table[p].alive)
        if not live or deadline.expired:
            return len(killed)
        send(live, signal.SIGKILL)
        killed.update(live)
        time.sleep(0.01)


#: Exit codes a shell uses for "could not even start the command".
_START_CODES = {
    126: "the command was found but could not be executed (permission denied?)",
    127: "command not found",
}


def describe_exit(code: int) -> str:
    """A process's return code in words (negative: killed by that signal)."""
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    meaning = _START_CODES.get(code)
    return f"exited with code {code}" + (f" ({meaning})" if meaning else "")


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            proc = parse_stat(pid, f.read())
    except OSError:
        try:
            os.kill(pid, 0)
        except OSError as e:
            return e.errno == errno.EPERM
        return True
    return proc is not None and proc.alive
