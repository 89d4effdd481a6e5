"""The usage report's :class:`.listeners.JobListener`: the run's records and outcomes in,
the plain facts of :mod:`..report.usage` out (that package imports no dispatch).

Wiring, in the executor (a few lines)::

    collector = UsageCollector()
    listener = UsageListener(collector, lambda: registry.stop_reason)
    listeners.append(listener)                  # every hand-over, refusal and end
    listener.workers_seen(scheduler_info["workers"])   # at start, and as workers come
    listener.worker_left(name)                  # as they go
    ... at the end (success, failure, Ctrl-C, landing):
    for line in collector.write_run(config.usage_report_dir, run_token, RunFacts(...)):
        say(line)
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..report.usage import Ended, Handover, RunFacts, UsageCollector, handover_from_job
from ..worker import timing
from .listeners import JobListener
from .outcomes import Finished
from .registry import JobRecord

#: Seconds the end of the run waits for the report (100,000 jobs take about 10).
WRITE_TIMEOUT = 120.0


@dataclass(frozen=True)
class ReportPlace:
    """Where and for which run the report is written at the end, and how to say so."""

    root: Path
    token: str
    mode: str
    began: float
    say: Callable[[str], None]


def usage_listener(
    root: Path | None,
    token: str,
    mode: str,
    stop_reason: Callable[[], str | None],
    say: Callable[[str], None],
    env: Mapping[str, str],
) -> UsageListener | None:
    """The run's usage report (None with --dask-slurm-no-usage-report): it records from now
    on and writes into ``root`` when the run ends."""
    if root is None:
        return None
    place = ReportPlace(root, token, mode, time.time(), say)
    return UsageListener(UsageCollector(), stop_reason, env.get("SLURM_JOB_ID", ""), place)


def ended_from(finished: Finished, stop: str | None = None) -> Ended:
    """The plain facts of a :class:`Finished`; ``stop``: why the run was stopping, which
    counts for a job killed or given no outcome (not one that failed by itself)."""
    outcome = finished.outcome
    killed = outcome is None or outcome.returncode < 0
    return Ended(
        ok=finished.ok,
        usage=finished.usage,
        returncode=None if outcome is None else outcome.returncode,
        start_error=None if outcome is None else outcome.start_error,
        problem=finished.problem,
        lost_on=None if finished.lost_on is None else finished.lost_on.name,
        stop=stop if killed and not finished.ok and finished.lost_on is None else None,
        cold=finished.cold is not None,
    )


def previous_key(record: JobRecord) -> str | None:
    """The task key a rerun replaces (:meth:`.registry.JobRecord.next_run`'s naming)."""
    if record.reruns <= 0:
        return None
    if record.previous_key is not None:  # a move may have come in between
        return record.previous_key
    return record.first_key if record.reruns == 1 else f"{record.first_key}-r{record.reruns - 1}"


def handover_from_record(record: JobRecord) -> Handover:
    facts = handover_from_job(record.job, record.key, record.way, record.handed_over or None)
    return dataclasses.replace(facts, rerun=record.reruns) if record.reruns else facts


class UsageListener(JobListener):
    """Feeds a :class:`..report.usage.UsageCollector` from the run's listener calls."""

    def __init__(
        self,
        collector: UsageCollector,
        stop_reason: Callable[[], str | None] = lambda: None,
        slurm_job: str = "",
        report: ReportPlace | None = None,
    ):
        self.collector = collector
        self._stop_reason = stop_reason
        #: The run's own allocation (its workers' SLURM job; a worker job's workers say
        #: their own in their usage).
        self.slurm_job = slurm_job
        self.report = report
        self._writer: threading.Thread | None = None
        self._lines: list[str] = []

    def run_ending(self, command: str) -> None:
        """Write the report on a thread of its own while the cluster closes (the close is
        mostly waiting for processes)."""
        place = self.report
        if place is None or self._writer is not None:
            return
        run = RunFacts(
            place.began, time.time(), place.mode, self.slurm_job, command,
            self._stop_reason() or "",
        )  # fmt: skip

        def write() -> None:
            began = time.time()
            self._lines = self.collector.write_run(place.root, place.token, run)
            if timing.ON:
                timing.record("usage_report", began, time.time())

        self._writer = threading.Thread(target=write, name="dask-slurm-usage", daemon=True)
        self._writer.start()

    def run_ended(self, command: str) -> None:
        """Say where the report is, once it is written (it never raises)."""
        if self.report is None:
            return
        self.run_ending(command)  # not started yet (an end that skipped it)
        assert self._writer is not None
        self._writer.join(WRITE_TIMEOUT)
        if self._writer.is_alive():
            self._lines = [f"the usage report is still being written after {WRITE_TIMEOUT:.0f} s"]
        for line in self._lines:
            self.report.say(line)

    def handed_over(self, records: Sequence[JobRecord]) -> None:
        for record in records:
            previous = previous_key(record)
            if previous is not None and previous == record.stopped_at_limit:
                self.collector.lost(previous, "stopped at its worker job's time limit; run again")
            elif previous is not None:
                self.collector.lost(previous)
            self.collector.handed_over(handover_from_record(record))

    def refused(self, keys: Sequence[str]) -> None:
        self.collector.stopping(keys, self._stop_reason() or "the run was stopping")

    def moved(self, old_key: str, record: JobRecord) -> None:
        self.collector.moved(old_key, record.key)

    def ended(self, record: JobRecord, finished: Finished) -> None:
        if finished.too_late and self._stop_reason() is None:
            return  # it never started there, and goes elsewhere (moved) under a new key
        self.collector.ended(finished.key, ended_from(finished, self._stop_reason()))

    def workers_seen(self, workers: Mapping[str, Mapping[str, Any]]) -> None:
        """Workers as the scheduler describes them (``scheduler_info()["workers"]``, by
        address): each one the collector does not know yet joins now."""
        slurm_job = self.slurm_job
        for info in workers.values():
            resources = info.get("resources") or {}
            self.collector.worker_joined(
                str(info.get("name", "")),
                str(info.get("host", "")),
                float(resources.get("cpus", info.get("nthreads", 0))),
                resources.get("mem_mb"),
                slurm_job,
                at=time.time(),
            )

    def worker_left(self, name: str) -> None:
        self.collector.worker_left(name)

    def stopping(self, keys: Iterable[str], why: str) -> None:
        self.collector.stopping(keys, why)
