"""The worker's preload hooks and housekeeping.

Dask loads :mod:`.task` as every worker's ``--preload`` module (clusters/spec.py names it,
``TASK_MODULE``), which takes its ``dask_setup`` and ``dask_teardown`` from here:
:func:`dask_setup` adopts the jobs' orphans (a child subreaper), starts the
housekeeping thread, which reports the jobs that started and ends the daemons of those
that ended, and, when the run named a job command for it (``warm_host.PRIME_VARIABLE``),
starts the warm process at once to parse it (``warm_host.prime_from_env``; the worker's
``dask_main`` has started it before Dask's import already); :func:`dask_teardown`
takes a closing worker's jobs with it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import http_guard, proctree, timing, warm_host
from .clock import landing_from_env
from .running import JOBS, KILL_GRACE_SECONDS, end_running_jobs

#: Seconds the housekeeping gathers what happened (jobs started, jobs ended) before it
#: reports the starts and looks for daemons of the finished jobs: at most once this often.
ORPHAN_SCAN_INTERVAL = 1.0
#: Seconds between looks for daemons when no job ends (adopted orphans that exited are
#: reaped then): the only timer of an idle worker's housekeeping.
QUIET_SCAN_INTERVAL = 30.0
#: The Dask event topic on which a worker says, once a second, which jobs it started.
STARTED_TOPIC = "dask-slurm-started"


def end_orphans() -> list[int]:
    """Kill the daemons of finished jobs: processes re-parented to this worker (a child
    subreaper) whose job marker names no job that still runs here. Returns their pids.
    Every process of the machine is read only when this worker has a child that is not a
    running job's or its warm process (an orphan, alive or to be reaped).

    The processes are read before the jobs: a job begun since has its key in ``active``
    then (it begins before its process exists), so its process is never taken for an
    orphan."""
    children = proctree.own_children()
    if children is not None and children <= JOBS.active()[0] | warm_host.HOST.pids():
        return []
    table = proctree.scan()
    pids, active = JOBS.active()
    known = pids | warm_host.HOST.pids()
    victims: list[int] = []
    for pid in proctree.children_of(os.getpid(), table):
        if pid in known:
            continue
        if not table[pid].alive:
            proctree.reap([pid])
            continue
        key = proctree.job_marker(pid)
        if key is not None and key not in active:
            victims += proctree.descendants([pid], table)
    proctree.send(victims, signal.SIGKILL)
    return victims


def report_started(worker: Any) -> None:
    """Tell the plugin which jobs started here since the last report: one small event a
    second at most, not one per job. If the worker then dies, the plugin knows which of
    its jobs were running (started), not merely waiting, even with no process left."""
    keys = JOBS.take_started()
    if keys:
        worker.log_event(STARTED_TOPIC, keys)


def housekeeping(worker: Any, stop: threading.Event, orphans: bool) -> None:
    """The worker's housekeeping: report started jobs; end daemons of finished jobs.

    It sleeps until a job starts or ends (``JOBS.chores``), gathers for
    ORPHAN_SCAN_INTERVAL what else happens meanwhile, then does what is due: the starts
    are reported once a second at most, and the daemons of a job are looked for twice
    after it ended. While jobs only run, it does not wake but every QUIET_SCAN_INTERVAL
    (adopted orphans that exited by themselves are reaped then)."""
    while not stop.is_set():
        quiet = not JOBS.chores.wait(QUIET_SCAN_INTERVAL)
        if stop.wait(ORPHAN_SCAN_INTERVAL):
            return
        JOBS.chores.clear()  # before the chores: what happens during them wakes the next pass
        scan = JOBS.scan_due(quiet)
        _chore(lambda: report_started(worker))
        if orphans and scan:
            _chore(end_orphans)


def _chore(chore: Callable[[], object]) -> None:
    try:
        chore()
    except Exception:  # never let the thread die; the next pass tries again
        return


def dask_setup(worker: Any) -> None:
    """Worker preload hook: adopt the jobs' orphans, and end those of finished jobs."""
    stopped = http_guard.enforce(worker)  # the token check is there, or no HTTP at all
    if stopped:
        import logging

        logging.getLogger("distributed.worker").warning(stopped)
    JOBS.in_worker = True
    JOBS.closing = False
    JOBS.landing_at = landing_from_env(os.environ)
    os.environ.pop(proctree.JOB_MARKER, None)  # the worker's own children are no job's
    timing.open_task_log()
    orphans = proctree.become_subreaper()
    thread = threading.Thread(
        target=housekeeping,
        args=(worker, threading.Event(), orphans),
        name="dask-slurm-housekeeping",
        daemon=True,
    )
    thread.start()
    # Not taken by worker/dask_main.py already (a worker started another way): taken out of
    # the environment here, before any job can copy it; the warm process starts meanwhile.
    prime = os.environ.pop(warm_host.PRIME_VARIABLE, None)
    if prime:
        threading.Thread(
            target=warm_host.prime_file, args=(prime,), name="dask-slurm-warm-prime", daemon=True
        ).start()


def dask_teardown(worker: Any) -> None:
    """Worker preload hook: a closing worker takes its jobs' processes with it, after
    noting which ones it ran for its supervisor's record (see :mod:`.supervisor`)."""
    _note_running(str(getattr(worker, "name", "")))
    end_running_jobs(KILL_GRACE_SECONDS)
    proctree.kill_all_below(os.getpid(), timeout=1.0)


def _note_running(name: str) -> None:
    from .supervisor import RECORD_DIR_VARIABLE, running_path

    # After the import: a job failing meanwhile is still one of those it ran.
    keys = JOBS.close()
    directory = os.environ.get(RECORD_DIR_VARIABLE)
    if not directory or not keys:
        return
    with contextlib.suppress(OSError):
        path = running_path(Path(directory), name, os.getpid())
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(keys))
