"""What runs on a Dask worker: one job's command, in its own process group, logged
(a direct-way job's log only if it prints or fails: :mod:`.job_log`).

This module is imported by every worker: it is also the workers' ``--preload`` module
(clusters/spec.py, ``TASK_MODULE``), whose hooks are :mod:`.preload`'s, so that
``dask_teardown`` kills whatever jobs are still running when a worker closes.
Cancelling a Dask future does not stop a running task, so the plugin keeps every running
command's process, by task key, and kills the whole process group itself: the jobs of
this worker process are :data:`.running.JOBS`.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import proctree, quick_exit, timing, warm_host
from .clock import late_words, too_late
from .environment import process_environment
from .job_log import JobLog, copy_output, drain, make_log_dir
from .logtail import read_tail
from .preload import STARTED_TOPIC as STARTED_TOPIC  # the topic, for the plugin's side
from .preload import dask_setup as dask_setup  # Dask looks for the hooks here
from .preload import dask_teardown as dask_teardown
from .running import (
    JOBS,
    KILL_GRACE_SECONDS,
    OUTSIDE_KILL_PAUSE,
    end_running_jobs,
    kill_later,
    signal_group,
)
from .waiting import Deadline
from .warm_link import WarmLost, WarmProc
from .wire import SYSTEM_TMPDIR, Cold, JobFailed, TaskOutcome, TaskSpec, TooLate, Usage, Why

if TYPE_CHECKING:
    from resource import struct_rusage

#: Shorter at interpreter exit: the worker is already going (SIGKILL may follow).
EXIT_GRACE_SECONDS = 1.0
#: How much of a failed job's log comes back with its outcome.
TAIL_LINES = 20
_TMPDIR_VARS = ("TMPDIR", "TMP", "TEMP", "TEMPDIR")

#: Seconds to wait for the processes of a job whose warm process died to be gone.
LOST_JOB_TIMEOUT = 10.0

#: A running job's process: started here, or forked on the warm path.
Proc = subprocess.Popen[bytes] | WarmProc


def _environment(spec: TaskSpec) -> dict[bytes, bytes]:
    # The marker survives setsid and double forks: see proctree.
    adds = [*spec.env, (proctree.JOB_MARKER, spec.key)]
    if spec.tmpdir is not None:
        tmp = tempfile.gettempdir() if spec.tmpdir == SYSTEM_TMPDIR else spec.tmpdir
        os.makedirs(tmp, exist_ok=True)  # as Snakemake's job preparation does
        adds.extend((name, tmp) for name in _TMPDIR_VARS)
    return process_environment(adds)


def _popen(spec: TaskSpec) -> subprocess.Popen[bytes]:
    """The job's command, its output (stdout and stderr) into one pipe, which the thread
    that waits for it copies into the job's log (:func:`.job_log.copy_output`)."""
    return subprocess.Popen(
        spec.argv,
        cwd=spec.cwd,
        env=_environment(spec),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        # Its own process group, for kill_tasks; but the worker's session, so that if
        # the worker itself is killed outright, whoever started it can still find and
        # end the job by session id.
        process_group=0,
    )


def _start(spec: TaskSpec, host: str, started: float) -> tuple[Proc, Cold | None]:
    """Start the job: on the warm path if it can go there, else its command. The process,
    and why a general-way job went the cold way (None: it did not)."""
    landing_at = JOBS.landing_at
    if landing_at is not None and too_late(spec.needs, started, landing_at):
        raise TooLate(late_words(spec.needs, started, landing_at))
    if not JOBS.begin(spec.key):
        stop = "it was stopped before it started"
        raise JobFailed(TaskOutcome(-1, host, started, started, "", stop))
    cold = spec.cold
    proc: Proc | None = None
    try:
        if spec.warm is not None:
            make_log_dir(spec.log_path)
            found = warm_host.HOST.start(spec)
            if isinstance(found, Cold):
                cold = found
            else:
                proc = found
        if proc is None:
            proc = _popen(spec)
    except OSError as e:
        JOBS.abandon(spec.key)
        error = f"{type(e).__name__}: {e}"
        raise JobFailed(TaskOutcome(-1, host, started, time.time(), "", error)) from None
    except BaseException:
        JOBS.abandon(spec.key)
        raise
    _register(spec.key, proc, started)
    return proc, cold


def _register(key: str, proc: Proc, started: float) -> None:
    if JOBS.register(key, proc, started):  # stopped while it was being started
        signal_group(proc, signal.SIGTERM)


#: A job whose warm process died before it said the job started (pid 0: unknown) may
#: have been forked just before: its process writes its marker first thing, within this.
MARKER_WINDOW = 0.2


def _end_lost_job(key: str, pgid: int) -> bool:
    """SIGKILL every process of the job ``key`` (its group, and whatever carries its
    marker) until none is left; whether that happened within LOST_JOB_TIMEOUT."""
    deadline = Deadline(LOST_JOB_TIMEOUT)
    if pgid <= 1:
        time.sleep(MARKER_WINDOW)
    while True:
        if pgid > 1:
            proctree.signal_group(pgid, signal.SIGKILL)
        table = proctree.scan()
        found = proctree.processes_of_jobs([key], table)
        alive = (pgid > 1 and proctree.pid_alive(pgid)) or bool(found)
        if not alive:
            return True
        if deadline.expired:
            return False
        proctree.send(proctree.descendants(found, table), signal.SIGKILL)
        proctree.reap(found)  # those this worker adopted
        time.sleep(0.02)


def _run_cold_after_loss(
    spec: TaskSpec, proc: WarmProc, reason: str, host: str, started: float
) -> tuple[int, Cold, JobLog]:
    """A warm job whose warm process died: end what is left of it, then run it again, in
    place, the cold way (whose own job preparation removes what the first try wrote)."""
    if not _end_lost_job(spec.key, proc.pid):
        error = (
            f"{reason}, and the job's processes (group {proc.pid}, marker "
            f"{proctree.JOB_MARKER}={spec.key}) did not end within {LOST_JOB_TIMEOUT:.0f} s: "
            "it is not run again, so that no two copies run"
        )
        raise JobFailed(TaskOutcome(-1, host, started, time.time(), "", error))
    # Not again the cold way if it was stopped, or its worker closes (the signal that
    # ended its warm process ends the worker too).
    stopped = JOBS.is_stopped(spec.key) or JOBS.closing
    log = JobLog(spec.log_path, append=True)
    lost = Cold(Why.LOST_WHILE_RUNNING, reason)
    if stopped:
        return -signal.SIGKILL, lost, log
    note = f"\ndask-slurm: {reason}; its processes are gone: running it the cold way\n"
    log.write(note.encode())
    cold = _popen(spec)
    _register(spec.key, cold, started)
    try:
        assert cold.stdout is not None
        copy_output(cold.pid, cold.stdout, log)
        returncode = _reap(cold)
    finally:
        signal_group(cold, signal.SIGKILL)
        drain(cold.stdout, log)
    return returncode, lost, log


def run_task(spec: TaskSpec) -> TaskOutcome:
    """Run one job's command to completion; :class:`JobFailed` if it did not succeed."""
    return run_measured(spec)[0]


def run_measured(spec: TaskSpec, worker: str = "") -> tuple[TaskOutcome, Usage | None]:
    """:func:`run_task`, and what the job used (None where the kernel could not say).

    ``worker`` is the Dask worker's name, for the record. A failed job's usage travels in
    its :class:`JobFailed`. A cold job is reaped here with ``os.wait4``; a warm job's
    figures come from the warm process that reaped it.
    """
    started = time.time()
    clock = time.monotonic()
    host = socket.gethostname()
    proc, cold = _start(spec, host, started)
    # Read after the fork: the worker's peak then is at least what the job inherited.
    floor = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // _RSS_UNIT
    rusage: tuple[float, int] | None = None
    # A warm job's process writes its own log (warm/child.py).
    log = JobLog(spec.log_path) if isinstance(proc, subprocess.Popen) else None
    returncode = -1
    try:
        try:
            if isinstance(proc, subprocess.Popen) and proc.stdout is not None and log:
                copy_output(proc.pid, proc.stdout, log)
            returncode, rusage = _wait(proc)
            if isinstance(proc, WarmProc):
                floor = proc.floor_kb or floor
        except WarmLost as lost:
            assert isinstance(proc, WarmProc)
            returncode, cold, log = _run_cold_after_loss(spec, proc, lost.reason, host, started)
        wall = time.monotonic() - clock
    finally:
        # What the job left in its process group (``cmd &``, ``nohup cmd &``) ends with it.
        signal_group(proc, signal.SIGKILL)
        if JOBS.killed_from_outside(spec.key, returncode):
            # Is its worker being ended with it? Then the slot is to start no other job:
            # it stays taken a moment (see OUTSIDE_KILL_PAUSE).
            time.sleep(OUTSIDE_KILL_PAUSE)
        last = JOBS.finish(spec.key, proc, returncode)
        signal_group(last, signal.SIGKILL)
        JOBS.ended()
        if log is not None:
            if isinstance(proc, subprocess.Popen):
                drain(proc.stdout, log)
            log.close(keep=returncode != 0)
        timing.task_done(spec.key, started, time.time())
    usage = None
    if rusage is not None:
        cpu, maxrss = rusage
        slurm_job = os.environ.get("SLURM_JOB_ID", "")
        usage = Usage(host, worker, slurm_job, started, wall, cpu, maxrss, floor)
    if returncode:
        tail = log.tail(TAIL_LINES) if log is not None else read_tail(spec.log_path, TAIL_LINES)
        outcome = TaskOutcome(returncode, host, started, time.time(), tail, cold=cold)
        raise JobFailed(outcome, usage)
    return TaskOutcome(0, host, started, time.time(), "", cold=cold), usage


#: ``ru_maxrss`` is in KiB on Linux, in bytes on macOS.
_RSS_UNIT = 1024 if sys.platform == "darwin" else 1


def _wait(proc: Proc) -> tuple[int, tuple[float, int] | None]:
    """The job's exit code, and its (CPU seconds, peak RSS KiB) where known."""
    if isinstance(proc, WarmProc):
        returncode = proc.wait()  # raises WarmLost
        known = proc.cpu is not None and proc.maxrss_kb is not None
        return returncode, (proc.cpu, proc.maxrss_kb) if known else None  # type: ignore[return-value]
    returncode, rusage = _reap_with_usage(proc)
    if rusage is None:
        return returncode, None
    return returncode, (rusage.ru_utime + rusage.ru_stime, rusage.ru_maxrss // _RSS_UNIT)


def _reap(proc: subprocess.Popen[bytes]) -> int:
    return _reap_with_usage(proc)[0]


def _reap_with_usage(proc: subprocess.Popen[bytes]) -> tuple[int, struct_rusage | None]:
    """Wait for the job's process as ``Popen.wait()`` does, but with ``os.wait4``, which
    also returns what it and its waited-for descendants used: ``(returncode, rusage)``.

    Like ``Popen.wait()`` (CPython's ``_wait``) it waits holding the Popen's waitpid lock,
    so that a ``poll()`` from another thread (``_kill_later``, the teardown) never reaps
    the process under it, and it sets ``returncode`` as Popen does. The rusage is None if
    something else reaped the process first, or on a Popen without that lock.
    """
    lock = getattr(proc, "_waitpid_lock", None)
    if lock is None:
        return proc.wait(), None
    while True:
        with lock:
            if proc.returncode is not None:  # another thread reaped it
                return proc.returncode, None
            try:
                pid, status, rusage = os.wait4(proc.pid, 0)
            except ChildProcessError:  # reaped elsewhere: Popen's own answer then
                proc.returncode = 0
                return 0, None
            if pid == proc.pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                return proc.returncode, rusage


#: The Dask event topic on which every task reports how its job ended.
EVENT_TOPIC = "dask-slurm-job"


def run_and_report(spec: TaskSpec) -> None:
    """The Dask task of one job: run it, then report how it ended as a Dask event.

    Never raises and returns nothing: the plugin holds no task result (see
    :mod:`..dispatch.dispatcher`), so the outcome travels in the event, which the worker sends
    before Dask learns that the task finished. Whatever fails, an event is sent."""
    from distributed import get_worker

    report(get_worker(), spec)


def report(worker: Any, spec: TaskSpec, send: Callable[[Any, Any], None] | None = None) -> None:
    """:func:`run_and_report` on ``worker``, from any thread; a batch's job (:mod:`.batch`)
    gives ``send(worker, event)``, which sends it with others that ended at once."""
    try:
        msg = _ended(spec, str(worker.name))
    except BaseException as e:  # its event could not be written: a bug
        msg = _problem(spec.key, e)
    if not msg["ok"]:  # where it failed: a worker whose worker job was ending under it?
        # Not "worker": the scheduler sets that key of a worker's event to its address.
        msg.update(worker_name=str(worker.name), worker_pid=os.getpid())
    worker.log_event(EVENT_TOPIC, msg) if send is None else send(worker, msg)


def _problem(key: str, e: BaseException) -> dict[str, Any]:
    return {"key": key, "ok": False, "problem": f"{type(e).__name__}: {e}"}


def _ended(spec: TaskSpec, worker_name: str) -> dict[str, Any]:
    """Run the job; its event (without the worker's name)."""
    msg: dict[str, Any]
    try:
        done, usage = run_measured(spec, worker_name)
        # How long it ran: the plugin learns each rule's durations (walltime placement).
        msg = {"key": spec.key, "ok": True, "seconds": done.finished - done.started}
        cold = done.cold
    except JobFailed as e:
        msg = {"key": spec.key, "ok": False, "outcome": _outcome_wire(e.outcome)}
        usage, cold = e.usage, e.outcome.cold
    except TooLate as e:  # never started: the plugin hands it over again
        msg = {"key": spec.key, "ok": False, "too_late": str(e)}
        usage, cold = None, None
    except BaseException as e:  # a bug, or the worker closing under the job
        msg = _problem(spec.key, e)
        usage, cold = None, None
    if cold is not None:  # a general-way job that went the cold way: why (Cold.from_wire)
        msg["cold"] = cold.to_wire()
    if usage is not None:
        msg["usage"] = usage.to_wire()
    return msg


def _outcome_wire(outcome: TaskOutcome) -> dict[str, Any]:
    """A failed job's outcome for its event: plain values (``TaskOutcome(**it)`` again);
    its :class:`.wire.Cold` travels beside it, as ``msg["cold"]``."""
    found = {f.name: getattr(outcome, f.name) for f in dataclasses.fields(outcome)}
    del found["cold"]
    return found


def kill_tasks(keys: list[str], grace: float = KILL_GRACE_SECONDS) -> list[str]:
    """Stop the given tasks: running ones now, and those not started yet when they start.

    Sends SIGTERM to the running process groups now and SIGKILL after ``grace`` seconds,
    without blocking the caller (this runs on the worker's event loop via
    ``Client.run``). Returns the keys that were running.
    """
    chosen, running = JOBS.stop(keys)
    for proc in chosen:
        signal_group(proc, signal.SIGTERM)
    if chosen:
        timer = threading.Timer(grace, kill_later, args=(chosen,))
        timer.daemon = True
        timer.start()
    return running


def withdraw_tasks(keys: list[str]) -> dict[str, float]:
    """Of ``keys``, those running here, with when each started; every other one of them
    will never start here (a landing withdraws what has not started). Atomic with
    :func:`_start`'s check: a job either runs already or never will."""
    return JOBS.withdraw(keys)


def running_tasks() -> list[str]:
    """Keys of the tasks whose commands are running on this worker."""
    return JOBS.keys()


@atexit.register
def _end_jobs_at_exit() -> None:
    """A worker exiting without its teardown must not leave its jobs running.

    That happens when a signal cuts the worker's close short (SLURM's SIGTERM arriving
    while the worker closes). Its jobs would be reparented to init, where SLURM's
    proctrack/linuxproc or pgid no longer sees them (a cgroup would), and run on.
    Worker threads are daemons, so interpreter exit does not wait for them.
    """
    end_running_jobs(EXIT_GRACE_SECONDS)
    if JOBS.in_worker:  # adopted daemons too; never in Snakemake's own process
        proctree.kill_all_below(os.getpid(), timeout=1.0)
        quick_exit.skip_final_collections()  # the worker leaves at once
