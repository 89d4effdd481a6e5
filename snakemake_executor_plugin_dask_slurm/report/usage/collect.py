"""The collector the run feeds while it runs, and the rows it makes at the end.

Cheap on the hot path: :meth:`UsageCollector.handed_over` (Snakemake's scheduling thread)
and :meth:`UsageCollector.ended` (the status or recovery thread) each store
one small record under a lock; every computation happens in :meth:`UsageCollector.write`,
once, at the end of the run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from ...worker.proctree import describe_exit
from .rows import Attempt, Ended, Handover, Outcome, RunFacts, Way, WorkerSpan, mb_of_kib


def _number(value: Any) -> float | None:
    """A resource value as a number; None when unset or not a number (``<TBD>``)."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def handover_from_job(job: Any, key: str, way: Way, at: float | None = None) -> Handover:
    """The :class:`Handover` of a Snakemake job (``JobExecutorInterface``) given to Dask
    under ``key``, run the ``way`` it was built."""
    resources = job.resources
    group = bool(job.is_group())
    wildcards = getattr(job, "wildcards_dict", None) or {}
    return Handover(
        key=key,
        rule=f"group {job.name}" if group else str(job.name),
        jobid=job.jobid if isinstance(job.jobid, int) else str(job.jobid),
        attempt=int(job.attempt),
        way=way,
        threads=int(job.threads),
        mem_mb=_number(resources.get("mem_mb")),
        runtime_min=_number(resources.get("runtime")),
        at=time.time() if at is None else at,
        wildcards=",".join(f"{k}={v}" for k, v in wildcards.items()),
        group=group,
        members=tuple(sorted({str(rule) for rule in job.rules})) if group else (),
    )


class UsageCollector:
    """What the run tells it, as it happens; the report's rows and files at the end.

    The run calls (every call is cheap, thread-safe, and never raises for an unknown key):

    - :meth:`handed_over` for each job given to Dask (a rerun too), :meth:`lost` for an
      attempt whose worker died under it (it runs again), :meth:`refused` for a job that
      was never given to Dask;
    - :meth:`ended` with how every task ended (success, failure, lost, cancelled);
    - :meth:`stopping` with the keys of jobs the run itself stops, and why;
    - :meth:`worker_joined` / :meth:`worker_left` as workers come and go;
    - :meth:`write` once, at the end.
    """

    def __init__(self, clock: Callable[[], float] = time.time):
        self._clock = clock
        self._lock = threading.Lock()
        self._handed: dict[str, Handover] = {}
        self._refused: list[tuple[Handover, str]] = []
        self._ended: dict[str, Ended] = {}
        self._stopped: dict[str, str] = {}
        self._lost: dict[str, str] = {}
        #: Each worker's spans in the farm (a restarted worker keeps its name).
        self._workers: dict[str, list[WorkerSpan]] = {}

    # -- while the run runs ----------------------------------------------------------

    def handed_over(self, facts: Handover) -> None:
        with self._lock:
            self._handed[facts.key] = facts

    def refused(self, facts: Handover, why: str) -> None:
        """A job that never reached Dask (e.g. it could not finish in the time left)."""
        with self._lock:
            self._refused.append((facts, why))

    def lost(self, key: str, why: str = "its worker died under it; run again") -> None:
        """The attempt of ``key`` is lost, whatever its own outcome said (it failed as its
        worker job ended under it, say): the job runs again under another key."""
        with self._lock:
            self._lost[key] = why

    def rerun(self, old_key: str, new_key: str, why: str = "its worker died") -> None:
        """The job of ``old_key`` runs again as ``new_key`` (its worker died under it);
        ``old_key``'s attempt is lost, whatever its own outcome said."""
        now = self._clock()
        with self._lock:
            old = self._handed.get(old_key)
            if old is None:
                return
            self._lost[old_key] = why
            self._handed[new_key] = replace(old, key=new_key, rerun=old.rerun + 1, at=now)

    def moved(self, old_key: str, new_key: str) -> None:
        """The job of ``old_key`` never started, and went to Dask again as ``new_key``:
        one attempt, under the new key."""
        with self._lock:
            old = self._handed.pop(old_key, None)
            if old is not None:
                self._handed[new_key] = replace(old, key=new_key)

    def ended(self, key: str, ended: Ended) -> None:
        with self._lock:
            self._ended.setdefault(key, ended)  # the first word counts

    def stopping(self, keys: Iterable[str], why: str) -> None:
        with self._lock:
            for key in keys:
                self._stopped.setdefault(key, why)

    def worker_joined(
        self,
        name: str,
        host: str,
        cpus: float,
        mem_mb: float | None = None,
        slurm_job: str = "",
        at: float | None = None,
    ) -> None:
        """A worker is in the farm from ``at`` (now); nothing if it already is."""
        at = self._clock() if at is None else at
        with self._lock:
            spans = self._workers.setdefault(name, [])
            if not spans or spans[-1].left is not None:
                spans.append(WorkerSpan(name, host, cpus, at, None, mem_mb, slurm_job))

    def worker_left(self, name: str, at: float | None = None) -> None:
        at = self._clock() if at is None else at
        with self._lock:
            spans = self._workers.get(name)
            if spans and spans[-1].left is None:
                spans[-1] = replace(spans[-1], left=at)

    # -- at the end --------------------------------------------------------------------

    def attempts(self) -> list[Attempt]:
        """One row per attempt handed over (and per refused job), in hand-over order."""
        with self._lock:
            handed = list(self._handed.values())
            ended = dict(self._ended)
            stopped = dict(self._stopped)
            lost = dict(self._lost)
            refused = list(self._refused)
        rows = [
            attempt_row(h, ended.get(h.key), stopped.get(h.key), lost.get(h.key)) for h in handed
        ]
        rows += [attempt_row(h, None, None, None, not_started=why) for h, why in refused]
        rows.sort(key=lambda a: a.handed_over)
        return rows

    def workers(self, attempts: list[Attempt] | None = None) -> list[WorkerSpan]:
        """Every worker told of, and (sized by what they ran) those that were not."""
        with self._lock:
            spans = {name: list(found) for name, found in self._workers.items()}
        if attempts is None:
            attempts = self.attempts()
        told = [span for found in spans.values() for span in found]
        return [*told, *unannounced_workers(attempts, set(spans))]

    def write(self, directory: Path, run: RunFacts, page: bool = True) -> list[str]:
        """Write the report's files into ``directory``; the lines to print at the end."""
        from .write import write_report

        attempts = self.attempts()
        return write_report(directory, attempts, self.workers(attempts), run, page=page)

    def write_run(self, root: Path, token: str, run: RunFacts, page: bool = True) -> list[str]:
        """Write this run's report into its own directory under ``root`` (see
        :func:`.write.run_report_dir`) and point ``root/latest`` at it; the lines to print.
        Never raises: a report that cannot be written is one line saying why."""
        from .write import point_latest, run_report_dir

        directory = run_report_dir(root, run.started, token)
        try:
            lines = self.write(directory, run, page=page)
            point_latest(root, directory)
        except Exception as e:
            return [
                f"the usage report could not be written to {directory}: {type(e).__name__}: {e}"
            ]
        return lines


def attempt_row(
    h: Handover,
    f: Ended | None,
    stop: str | None,
    lost: str | None,
    not_started: str | None = None,
) -> Attempt:
    """The row of one attempt: what it asked, and how it ended (see :data:`.rows.Outcome`)."""
    outcome: Outcome
    if not_started is not None:
        outcome, detail = "not-started", not_started
    else:
        outcome, detail = classify(f, stop, lost)
    u = f.usage if f is not None else None
    # A warm job its worker ran cold after all (the worker's warm process could not take it).
    way: Way = "cold" if f is not None and f.cold and h.way == "warm" else h.way
    return Attempt(
        h.key, h.rule, h.jobid, h.attempt, h.rerun, way, h.wildcards, h.group, h.threads,
        h.mem_mb, h.runtime_min, h.at, outcome, detail,
        *(("", "", "", None, None, None, None, None, h.members) if u is None else (
            u.host, u.worker, u.slurm_job, u.started, u.wall, u.cpu,
            mb_of_kib(u.max_rss_kb) if u.rss_exact else None,
            None if u.rss_exact else mb_of_kib(u.max_rss_kb),
            h.members,
        )),
    )  # fmt: skip


def classify(f: Ended | None, stop: str | None, lost: str | None) -> tuple[Outcome, str]:
    """How an attempt ended, and the detail for ``jobs.tsv``."""
    if lost is not None:
        return "lost", lost
    if f is None:
        return ("stopped", stop) if stop else ("not-started", "no outcome came back")
    if f.ok:
        return "done", "exit 0"
    if f.lost_on is not None:
        return "lost", f"its worker {f.lost_on} died"
    ran = f.usage is not None
    stop = f.stop or stop
    if stop is not None and (f.returncode is None or f.returncode < 0):
        return ("stopped" if ran else "not-started"), stop
    if f.start_error:
        return "failed", f"could not be started: {f.start_error}"
    if f.returncode is not None:
        return "failed", describe_exit(f.returncode)
    return ("failed" if ran else "not-started"), f.problem or "it did not finish"


def unannounced_workers(attempts: list[Attempt], known: set[str]) -> list[WorkerSpan]:
    """Workers that ran jobs but were never announced: sized by the most threads their
    jobs used at once, present from their first job's start to their last job's end."""
    by_worker: dict[str, list[Attempt]] = {}
    for a in attempts:
        if a.worker and a.worker not in known and a.started is not None:
            by_worker.setdefault(a.worker, []).append(a)
    spans = []
    for name, runs in sorted(by_worker.items()):
        events = sorted(
            [(a.started, a.threads) for a in runs if a.started is not None]
            + [(a.finished, -a.threads) for a in runs if a.finished is not None]
        )
        busy = peak = 0
        for _, delta in events:
            busy += delta
            peak = max(peak, busy)
        first, last = events[0][0], events[-1][0]
        spans.append(
            WorkerSpan(name, runs[0].host, peak, first, last, None, runs[0].slurm_job, True)
        )
    return spans
