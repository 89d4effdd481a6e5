"""What becomes of the jobs of a worker that died: wait until their processes are gone.

A worker can die under its jobs (SIGKILL, the kernel's out-of-memory killer, its node
lost). Dask then fails its tasks at once (the plugin's scheduler never re-runs them on
its own, see :mod:`..worker.scheduler_preload`), but the jobs' processes may still be writing
their outputs: reporting the failure then would let Snakemake remove the outputs and the
orphans write them back, and running the job again would run two copies at once.

So each lost job waits here until its processes are known to be gone: the worker's
supervisor kills them and writes a record (:mod:`..worker.supervisor`), which this thread
looks for. If no record comes within ``CONFIRM_TIMEOUT`` (the supervisor died too, or the
node is unreachable), the cluster source is asked to end them another way
(:meth:`..clusters.base.ClusterSource.sweep`: an srun step on the node, or a search of
this machine in local mode). Only then is the run told (``on_gone``), with how the
processes were ended, or that they could not be; :func:`decide` says whether the job runs
again or fails.

Runs on a thread of its own: nothing here may block Snakemake's status loop.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..report.messages import LOST_TWICE, lost_job_message, unconfirmed_verdict
from ..worker.supervisor import Swept
from .outcomes import WorkerRef

logger = logging.getLogger(__name__)

#: Seconds to wait for a dead worker's supervisor to record that its jobs are gone.
CONFIRM_TIMEOUT = 10.0
#: How often the record directory is looked at while something waits.
POLL_INTERVAL = 0.05


@dataclass(frozen=True)
class Gone:
    """How the processes of a dead worker's jobs were ended."""

    how: str
    #: The supervisor's record (exit of the worker, jobs it found running), if any.
    record: dict[str, Any] = field(default_factory=dict)

    @property
    def worker_exit(self) -> str:
        return str(self.record.get("exit") or "died")


@dataclass
class _Waiting:
    worker: WorkerRef
    keys: list[str]
    deadline: float


#: A job whose worker died while it ran this often is not run again.
MAX_LOSSES = 2


@dataclass(frozen=True)
class Verdict:
    """What to do with one job of a dead worker, and the sentence that says so."""

    rerun: bool
    message: str
    #: The job was running there (its processes were found), not merely waiting.
    running: bool


def decide(
    label: str,
    key: str,
    worker: str,
    gone: Gone | None,
    lost_on: list[str],
    stop: str | None,
    ran: bool = False,
) -> Verdict:
    """Run a dead worker's job again, or fail it (pure; ``lost_on`` is updated: the
    workers that died while it ran). It was running there when its processes were found
    (``gone``'s record), or ``ran`` says so (its own outcome came after its worker was
    lost)."""
    running = ran or (gone is not None and key in gone.record.get("jobs_left_running", ()))
    if running:
        lost_on.append(worker)
    how = f"it {gone.worker_exit}, and {gone.how}" if gone else None
    if gone is None:
        verdict = unconfirmed_verdict(worker, key)
    elif stop:
        verdict = f"It is not run again: {stop}."
    elif len(lost_on) >= MAX_LOSSES:
        verdict = f"Its workers died under it on {', '.join(lost_on)}. {LOST_TWICE}"
    else:
        again = "Running it again on another worker."
        return Verdict(True, lost_job_message(label, worker, running, how, again), running)
    return Verdict(False, lost_job_message(label, worker, running, how, verdict), running)


def read_record(record_dir: Path, name: str, pid: int | None) -> dict[str, Any] | None:
    """The supervisor's record of worker ``name`` (pid ``pid``), or None if not written."""
    if pid is None:
        return None
    try:
        data = json.loads((record_dir / f"{name}-{pid}.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class Recovery:
    """Collects lost jobs per dead worker and reports each batch once it is safe."""

    def __init__(
        self,
        record_dir: Path | None,
        sweep: Callable[[str, Sequence[str]], Swept | None],
        on_gone: Callable[[WorkerRef, list[str], Gone | None], None],
        on_worker_removed: Callable[[], None],
        confirm_timeout: float = CONFIRM_TIMEOUT,
    ):
        self._record_dir = record_dir
        self._sweep = sweep
        self._on_gone = on_gone
        self._on_worker_removed = on_worker_removed
        self._timeout = confirm_timeout
        self._waiting: dict[tuple[str, int | None], _Waiting] = {}
        self._removed = 0
        self._calls: list[Callable[[], None]] = []
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="dask-slurm-recovery", daemon=True)
        self._thread.start()

    def lost(self, key: str, worker: WorkerRef) -> None:
        """A task ended because ``worker`` died (called from the status thread)."""
        with self._cond:
            entry = self._waiting.get((worker.name, worker.pid))
            if entry is None:
                entry = _Waiting(worker, [], time.monotonic() + self._timeout)
                self._waiting[worker.name, worker.pid] = entry
            entry.keys.append(key)
            self._cond.notify()

    def worker_removed(self) -> None:
        """A worker left the scheduler unexpectedly (called from Dask's event thread)."""
        with self._cond:
            self._removed += 1
            self._cond.notify()

    def call(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` on this thread (for work that may wait on SLURM)."""
        with self._cond:
            self._calls.append(callback)
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not (self._closed or self._waiting or self._removed or self._calls):
                    self._cond.wait()
                if self._closed:
                    return
                removed, self._removed = self._removed, 0
                calls, self._calls = self._calls, []
                batches = self._take_ready()
            if removed:
                self._call(self._on_worker_removed)
            for callback in calls:
                self._call(callback)
            for entry, gone in batches:
                if gone is None:  # no record in time: end them another way
                    swept = self._sweep(entry.worker.name, entry.keys)
                    if swept is not None:
                        gone = Gone(swept.how, {"jobs_left_running": list(swept.running)})
                self._call(self._on_gone, entry.worker, entry.keys, gone)
            if not (batches or removed or calls):
                time.sleep(POLL_INTERVAL)

    def _take_ready(self) -> list[tuple[_Waiting, Gone | None]]:
        """Entries whose record arrived (with it) or whose wait is over (with None)."""
        ready: list[tuple[_Waiting, Gone | None]] = []
        now = time.monotonic()
        for ident, entry in list(self._waiting.items()):
            record = None
            if self._record_dir is not None:
                record = read_record(self._record_dir, entry.worker.name, entry.worker.pid)
            if record is not None:
                killed = record.get("processes_killed", 0)
                how = f"its supervisor ended the {killed} process(es) its jobs had left"
                ready.append((entry, Gone(how, record)))
            elif now >= entry.deadline or self._record_dir is None:
                ready.append((entry, None))
            else:
                continue
            del self._waiting[ident]
        return ready

    def _call(self, callback: Callable[..., None], *args: Any) -> None:
        try:
            callback(*args)
        except Exception:  # never let the thread die: later losses still need it
            logger.exception("dask-slurm: handling a lost worker failed")
