"""The jobs of this worker process, in one object under one lock (:data:`JOBS`, as
:data:`.warm_host.HOST` is its warm process).

:mod:`.task` registers each job's process as it starts and takes it off when it ends;
``kill_tasks`` and ``withdraw_tasks`` stop jobs, running or not started yet; the worker's
preload (:mod:`.preload`) reports the jobs that started and looks for the daemons of those
that ended. Ending every running job (a closing worker, the interpreter's exit) is here too.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Protocol

from . import proctree
from .waiting import wait_until

#: Seconds between SIGTERM and SIGKILL when a job is stopped.
KILL_GRACE_SECONDS = 3.0
#: Looks for daemons after a job ended: one of them may fork while it is being killed.
SCANS_AFTER_AN_END = 2
#: How long a job that failed is still named in a closing worker's note of the jobs it ran
#: (:meth:`RunningJobs.close`). A cancelled SLURM job's processes all get SIGTERM at
#: once: its jobs may end (by the signal, or a job's Snakemake that exits 1 on it) before
#: their worker's teardown, their outcomes never sent; they were running when the worker
#: died all the same.
FAILED_LATELY_SECONDS = 60.0
#: How long a job killed from outside by the signals that end a SLURM job (SIGTERM, then
#: SIGKILL; not the plugin's stop, not its worker's close) holds its slot before it is
#: taken off: the signal may be ending the worker too (a cancelled SLURM job), which then
#: starts no other job (distributed's worker starts none once it closes, and it begins to
#: close within milliseconds of the signal). Without the wait, the freed slot would start a
#: waiting job just for the teardown to kill it. Such kills are rare (scancel, the
#: kernel's OOM killer).
OUTSIDE_KILL_PAUSE = 0.5
#: Exit statuses of a job those signals killed: its process died of one, or its shell
#: told of one (128 + its number).
KILLED_STATUSES = frozenset(
    code for sig in (signal.SIGTERM, signal.SIGKILL) for code in (-sig, 128 + sig)
)


class Proc(Protocol):
    """A running job's process: a ``Popen`` started here, or a warm one
    (:class:`.warm_link.WarmProc`)."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...


class RunningJobs:
    """What this worker process knows of its jobs; the lock guards the collections and
    ``scans_due``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: dict[str, Proc] = {}
        #: Keys of jobs being started (not yet running): their processes are not orphans.
        self.starting: set[str] = set()
        #: Keys of jobs that were stopped: one that has not started yet must never start.
        self.stopped: set[str] = set()
        #: When each running job started (for the landing: what it has left to run).
        self.began: dict[str, float] = {}
        #: Jobs started since the last report to the plugin (:mod:`.preload`).
        self.newly_started: list[str] = []
        #: Looks for daemons still due (a job ended).
        self.scans_due = 0
        #: Set when there is housekeeping to do (a job started or ended): see :mod:`.preload`.
        self.chores = threading.Event()
        #: Set in a Dask worker (by its preload), never in Snakemake's own process.
        self.in_worker = False
        #: This worker's landing point (None: no time limit), from its environment.
        self.landing_at: float | None = None
        #: When each job that failed within FAILED_LATELY_SECONDS ended (monotonic),
        #: oldest first; not those the plugin stopped or this worker's close ended.
        self.failed_at: dict[str, float] = {}
        #: Set by the worker's teardown: the jobs it ends are not ended from outside.
        self.closing = False

    # -- a job's start and end (worker.task) --------------------------------------------------

    def begin(self, key: str) -> bool:
        """The job ``key`` is being started, unless it was stopped (False)."""
        with self.lock:
            if key in self.stopped:
                return False
            self.starting.add(key)
            return True

    def abandon(self, key: str) -> None:
        """The job ``key`` did not start after all."""
        with self.lock:
            self.starting.discard(key)

    def register(self, key: str, proc: Proc, started: float) -> bool:
        """The job ``key`` runs as ``proc``; whether it was stopped while it was started."""
        with self.lock:
            self.running[key] = proc
            self.began[key] = started
            self.newly_started.append(key)
            self.starting.discard(key)
            stopped = key in self.stopped
        self.chores.set()
        return stopped

    def is_stopped(self, key: str) -> bool:
        with self.lock:
            return key in self.stopped

    def killed_from_outside(self, key: str, returncode: int) -> bool:
        """Whether the job ``key``, ended with ``returncode``, was killed by SLURM's
        signals from outside: neither the plugin's stop nor this worker's close."""
        if returncode not in KILLED_STATUSES:
            return False
        with self.lock:
            return not self.closing and key not in self.stopped

    def finish(self, key: str, proc: Proc, returncode: int) -> Proc:
        """The job ``key`` ended with ``returncode`` (-1 also when its wait failed):
        its last registered process (``proc`` if none). One that failed, neither stopped
        by the plugin nor ended by this worker's close, is remembered a while
        (:meth:`close`)."""
        with self.lock:
            last = self.running.pop(key, proc)
            self.began.pop(key, None)
            if returncode != 0 and not self.closing and key not in self.stopped:
                self._note_failed(key)
        return last

    def _note_failed(self, key: str) -> None:
        now = time.monotonic()
        failed_at = self.failed_at
        failed_at.pop(key, None)  # a key run again here goes last: oldest first holds
        failed_at[key] = now
        while failed_at:  # forget those that failed before the window, oldest first
            oldest = next(iter(failed_at))
            if failed_at[oldest] > now - FAILED_LATELY_SECONDS:
                break
            del failed_at[oldest]

    def ended(self) -> None:
        """A job ended: its daemons (if it left any) are to be looked for."""
        with self.lock:
            self.scans_due = SCANS_AFTER_AN_END
        self.chores.set()

    # -- what the plugin asks ---------------------------------------------------------------

    def stop(self, keys: list[str]) -> tuple[list[Proc], list[str]]:
        """Mark ``keys`` stopped; the processes of those running, and their keys."""
        with self.lock:
            self.stopped.update(keys)
            chosen = [p for k, p in self.running.items() if k in self.stopped]
            running = sorted(k for k in self.running if k in self.stopped)
        return chosen, running

    def withdraw(self, keys: list[str]) -> dict[str, float]:
        """Of ``keys``, those running or being started, with when each started; every
        other one of them will never start here."""
        with self.lock:
            running = {
                k: self.began.get(k, 0.0) for k in keys if k in self.running or k in self.starting
            }
            self.stopped.update(k for k in keys if k not in running)
        return running

    def keys(self) -> list[str]:
        with self.lock:
            return sorted(self.running)

    def close(self) -> list[str]:
        """This worker closes: the jobs it ends from now on are its own doing, not failures
        from outside. The jobs it was running, taken at that moment: those running, and
        those that failed within FAILED_LATELY_SECONDS (see :meth:`finish`)."""
        with self.lock:
            self.closing = True
            now = time.monotonic()
            lately = (k for k, t in self.failed_at.items() if t > now - FAILED_LATELY_SECONDS)
            return sorted({*self.running, *lately})

    def procs(self) -> list[Proc]:
        with self.lock:
            return list(self.running.values())

    # -- the housekeeping (worker.preload) ------------------------------------------------------

    def active(self) -> tuple[set[int], set[str]]:
        """The running jobs' pids, and the keys of the jobs running or being started."""
        with self.lock:
            return {p.pid for p in self.running.values()}, set(self.running) | self.starting

    def take_started(self) -> list[str]:
        """The jobs started since the last time this was asked."""
        with self.lock:
            keys = self.newly_started[:]
            self.newly_started.clear()
        return keys

    def scan_due(self, quiet: bool) -> bool:
        """Whether this pass of the housekeeping looks for daemons (always after a quiet
        wait); one look fewer is due after it, and the next pass wakes while any is."""
        with self.lock:
            scan = quiet or self.scans_due > 0
            self.scans_due = max(0, self.scans_due - 1)
            if self.scans_due:
                self.chores.set()
        return scan


#: The jobs of this worker process.
JOBS = RunningJobs()


def signal_group(proc: Proc, sig: signal.Signals) -> None:
    # The job's shell (or warm process) leads its group. A warm job whose warm process
    # died before it said the job started has no known pid (0): never killpg(0), which
    # would signal this worker's own group.
    if proc.pid > 1:
        proctree.signal_group(proc.pid, sig)


def kill_later(procs: list[Proc]) -> None:
    for proc in procs:
        if proc.poll() is None:
            signal_group(proc, signal.SIGKILL)
        # The group may outlive its leader (a background child): finish it too.
        signal_group(proc, signal.SIGKILL)


def end_running_jobs(grace: float) -> None:
    """SIGTERM every running job's process group, SIGKILL what is left after ``grace``."""
    procs = JOBS.procs()
    for proc in procs:
        signal_group(proc, signal.SIGTERM)
    wait_until(lambda: all(p.poll() is not None for p in procs), grace)
    kill_later(procs)
