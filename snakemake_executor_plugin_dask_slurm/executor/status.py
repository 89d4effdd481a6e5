"""The run's status: its file (``<run dir>/status.json``, every few seconds) and its
progress line (every ``--dask-slurm-status-interval`` seconds), both from one thread of
their own: nothing here runs per job (:mod:`..dispatch.progress` counts; this reads)."""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..clusters.base import ClusterSource
from ..config import RunConfig
from ..dispatch.clock.allocation import AllocationClock
from ..dispatch.listeners import Listeners
from ..dispatch.progress import Load, ProgressCounts, Reading, figures, scheduler_load
from ..report.status_file import (
    FAILED,
    FILE_EVERY,
    INTERRUPTED,
    RUNNING,
    STATUS_NAME,
    SUCCESS,
    process_start,
    progress_line,
    write_status,
)

if TYPE_CHECKING:
    from .run import Hooks

logger = logging.getLogger(__name__)

#: The window of the rate when the line is off (the file's rate).
RATE_WINDOW = 60.0


def run_facts(
    run_dir: Path, cluster: str, interval: float, env: Mapping[str, str], **more: Any
) -> dict[str, Any]:
    """What does not change while the run runs: who writes the file, where, the mode and
    the allocation (``more``: the scheduler's and dashboard's addresses, ...)."""
    pid = os.getpid()
    job = env.get("SLURM_JOB_ID")
    return {
        "version": 1,
        "started_at": time.time(),
        "host": socket.gethostname(),
        "pid": pid,
        "pid_start": process_start(pid),
        "workdir": os.getcwd(),
        "run_dir": str(run_dir),
        "cluster": cluster,
        "allocation": {"job_id": job, "end": env.get("SLURM_JOB_END_TIME")} if job else None,
        "status_interval": interval,
        "file_every": FILE_EVERY,
        **more,
    }


class StatusReporter:
    """The thread that writes the status file and says the progress line."""

    def __init__(
        self, facts: dict[str, Any], counts: ProgressCounts, read: Callable[[bool], Reading],
        say: Callable[[str], None], landing_at: Callable[[], float | None],
    ) -> None:  # fmt: skip
        self.path = Path(facts["run_dir"]) / STATUS_NAME
        self._facts = facts
        self.counts = counts
        self._read = read
        self._say = say
        self._landing_at = landing_at
        self._interval = float(facts["status_interval"])
        self._window = self._interval or RATE_WINDOW
        self._readings: deque[Reading] = deque()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dask-slurm-status", daemon=True)
        self._last: dict[str, Any] = {}

    def start(self) -> None:
        self._write(RUNNING, self._reading())
        self._thread.start()

    def _reading(self, ask_scheduler: bool = True) -> Reading | None:
        try:
            return self._read(ask_scheduler)
        except Exception:  # never the run's failure: a round with no figures
            logger.debug("status: no reading", exc_info=True)
            return None

    def _run(self) -> None:
        next_line = time.monotonic() + self._interval
        while not self._stop.wait(min(FILE_EVERY, self._interval or FILE_EVERY)):
            data = self._write(RUNNING, self._reading())
            if self._interval and time.monotonic() >= next_line and data:
                next_line += self._interval
                self._say(progress_line(data))

    def _write(self, state: str, reading: Reading | None) -> dict[str, Any] | None:
        if reading is not None:
            # The rate over the window: from the newest reading at least that old.
            while len(self._readings) > 1 and reading.at - self._readings[1].at >= self._window:
                self._readings.popleft()
            before = self._readings[0] if self._readings else None
            self._readings.append(reading)
            self._last = figures(reading, before, self.counts, self._landing_at())
        data = {**self._facts, **self._last, "state": state, "updated_at": time.time()}
        try:
            write_status(self.path, data)
        except OSError as e:  # a full disk: said at debug level, the run goes on
            logger.debug("status: %s not written: %s", self.path, e)
            return None
        return data

    def close(self, interrupted: bool) -> None:
        """Stop the thread, then write how the run ended (:func:`end_state`; once, whatever
        happens); ``interrupted``: the run was stopped (Ctrl-C, SIGTERM, a landing)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(FILE_EVERY + 5)
        # Not the scheduler at the end: it may be gone, and the run's end must not wait.
        # Its workers as last seen, running nothing: every job was told or stopped.
        reading = self._reading(ask_scheduler=False)
        seen = self._readings[-1].load if self._readings else None
        if reading is not None and seen is not None:
            reading = dataclasses.replace(reading, load=Load(seen.workers, seen.slots, 0))
        done, total = (reading.done, reading.total) if reading is not None else (None, None)
        state = end_state(self.counts, interrupted, done, total)
        data = self._write(state, reading)
        if data and self._interval and state != RUNNING:
            self._say(f"{progress_line(data)}; the run ended: {state}")


def end_state(
    counts: ProgressCounts, interrupted: bool, done: int | None, total: int | None
) -> str:
    """How the run ended: failed (a job failed: Snakemake then cancels the rest),
    interrupted (Ctrl-C, SIGTERM, a landing), failed (jobs left undone), else success."""
    if counts.failed:
        return FAILED
    if interrupted:
        return INTERRUPTED
    if done is not None and total is not None and done < total:
        return FAILED
    return SUCCESS


def start_status(
    config: RunConfig, source: ClusterSource, client: Any, listeners: Listeners,
    in_flight: Callable[[], int], stopping: Callable[[], bool], hooks: Hooks,
    clock: AllocationClock | None, jobs_of: Callable[[Sequence[str]], Sequence[str]] = list,
) -> StatusReporter:  # fmt: skip
    """The status file and line, started: a listener that counts, a thread that reads."""
    counts = ProgressCounts(stopping)
    listeners.append(counts)
    link = getattr(source.security, "link_file", None)
    facts = run_facts(
        config.run_dir, config.cluster, config.status_interval, os.environ,
        scheduler=getattr(client.scheduler, "address", None),
        dashboard=client.dashboard_link if config.dashboard else None,
        dashboard_link_file=str(link) if link is not None and link.exists() else None,
        usage_report_dir=str(config.usage_report_dir) if config.usage_report_dir else None,
    )  # fmt: skip

    pool = getattr(source, "pool", None)  # a farm that grows with worker jobs

    def read(ask_scheduler: bool) -> Reading:
        done, total = hooks.progress()
        jobs = pool.running_jobs() if pool is not None else None
        load = scheduler_load(client, jobs_of) if ask_scheduler else None
        return Reading(time.time(), done, total, in_flight(), load, jobs)

    def landing_at() -> float | None:
        end = clock.watch.end if clock is not None else None
        return end.landing_at if end is not None else None

    reporter = StatusReporter(facts, counts, read, hooks.say.info, landing_at)
    reporter.start()
    return reporter
