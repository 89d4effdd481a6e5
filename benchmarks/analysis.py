"""Turn the wrapper's timestamps into the figures: latencies, bring-up, teardown.

Per job, six instants are known, all from the plugin's timing hook (worker/timing.py):
``submit`` (Snakemake handed the job to the executor, ``run_job_pre``),
``started``/``finished`` (the worker's ``run_task`` began / returned), ``noticed`` (Dask
told the executor: its event handler ran), ``reporting`` (the executor's status thread
began its report) and ``told`` (that report to Snakemake returned).

*Submission -> task start* counts only the time the executor adds. With ``-j unlimited``
every job is submitted at once and most of them wait in Dask's queue for a free thread:
that wait is the workload's, not the executor's. So each job's latency is measured from
the later of its submission and the moment a worker thread became free for it, found by
replaying the recorded task spans on the cluster's ``slots`` threads in start order (a
task takes the thread that was freed earliest). ``raw`` keeps the plain
``started - submit`` as well. *Task end -> Snakemake told* is ``told - finished``; it is
split into *task end -> noticed* (the worker's completion message through the scheduler to
the client, and Dask's callback thread), *noticed -> reporting* (waking the executor's
status thread, and waiting behind the reports before it) and *reporting -> told* (the
report itself, which waits for Snakemake's scheduler lock; Snakemake holds that lock while
it post-processes a batch of finished jobs, so the jobs reported after a blocked one queue
up behind it).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Events:
    init: float | None = None
    ready: float | None = None
    slots: int | None = None
    cluster_start: float | None = None
    cluster_close: float | None = None
    shutdown: tuple[float, float] | None = None
    submits: dict[str, float] = field(default_factory=dict)
    noticed: dict[str, float] = field(default_factory=dict)
    reporting: dict[str, float] = field(default_factory=dict)
    told: dict[str, float] = field(default_factory=dict)
    failed: int = 0
    #: Snakemake's post-processing rounds: (seconds holding its scheduler lock, jobs)
    finish_rounds: list[tuple[float, int]] = field(default_factory=list)
    #: key -> (started, finished) on the worker
    tasks: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: Tasks a worker ran more than once (by key), and completions Dask reported more
    #: than once: both must be 0 (the dispatcher tells Snakemake once either way).
    ran_twice: int = 0
    noticed_twice: int = 0

    @property
    def bringup_seconds(self) -> float | None:
        if self.init is None or self.ready is None:
            return None
        return self.ready - self.init

    @property
    def teardown_seconds(self) -> float | None:
        return None if self.shutdown is None else self.shutdown[1] - self.shutdown[0]


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except OSError:
        return []


def parse_events(path: Path, worker_dir: Path) -> Events:
    """Read the wrapper's event file and the workers' task files (missing: empty)."""
    events = Events()
    for file in sorted(worker_dir.glob("*.tsv")) if worker_dir.is_dir() else []:
        for line in _lines(file):
            key, started, finished = line.split("\t")
            events.ran_twice += key in events.tasks
            events.tasks[key] = (float(started), float(finished))
    lines = _lines(path)
    for line in lines:
        kind, *rest = line.split("\t")
        if kind == "init":
            events.init = float(rest[0])
        elif kind == "ready":
            events.ready, events.slots = float(rest[0]), int(rest[1])
        elif kind == "cluster_start":
            events.cluster_start = float(rest[0])
        elif kind == "cluster_close":
            events.cluster_close = float(rest[0])
        elif kind == "finish_jobs":
            events.finish_rounds.append((float(rest[1]) - float(rest[0]), int(rest[2])))
        elif kind == "shutdown":
            events.shutdown = (float(rest[0]), float(rest[1]))
        elif kind == "submit":
            events.submits[rest[0]] = float(rest[1])
        elif kind == "noticed":  # the first is when the executor learned it
            events.noticed_twice += rest[0] in events.noticed
            events.noticed.setdefault(rest[0], float(rest[1]))
        elif kind == "reporting":
            events.reporting[rest[0]] = float(rest[1])
        elif kind == "told":
            key, ok, told = rest
            events.told[key] = float(told)
            events.failed += ok != "True"
    return events


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) with linear interpolation; None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarize(values_seconds: Sequence[float]) -> dict[str, float | int | None]:
    """p50, p99 and max in milliseconds, and the sample count."""

    def ms(value: float | None) -> float | None:
        return None if value is None else round(value * 1000, 3)

    return {
        "count": len(values_seconds),
        "p50_ms": ms(percentile(values_seconds, 50)),
        "p99_ms": ms(percentile(values_seconds, 99)),
        "max_ms": ms(max(values_seconds, default=None)),
    }


@dataclass(frozen=True)
class Span:
    submit: float
    started: float
    finished: float


def spans(events: Events) -> list[Span]:
    """Every job whose submission and worker start and end are known."""
    found = []
    for key, (started, finished) in events.tasks.items():
        submit = events.submits.get(key)
        if submit is not None:
            found.append(Span(submit, started, finished))
    return found


def start_latencies(jobs: Iterable[Span], slots: int) -> list[float]:
    """Per job: start minus the later of its submission and a thread becoming free."""
    free = [-math.inf] * max(1, slots)
    latencies = []
    for job in sorted(jobs, key=lambda j: j.started):
        freed = heapq.heappop(free)
        ready = max(job.submit, min(freed, job.started))
        latencies.append(job.started - ready)
        heapq.heappush(free, job.finished)
    return latencies


def raw_start_latencies(jobs: Iterable[Span]) -> list[float]:
    return [j.started - j.submit for j in jobs]


def task_ends(events: Events) -> dict[str, float]:
    """When each task ended on its worker."""
    return {key: finished for key, (_, finished) in events.tasks.items()}


def intervals(start: dict[str, float], end: dict[str, float]) -> list[float]:
    """``end - start`` for every key in both."""
    return [t - start[key] for key, t in end.items() if key in start]


def makespan(task_spans: Sequence[tuple[float, float]]) -> float | None:
    if not task_spans:
        return None
    return max(end for _, end in task_spans) - min(start for start, _ in task_spans)


def phases(events: Events, launched: float, wall: float) -> dict[str, float] | None:
    """Where a run's wall time went, in seconds (None without the events):

    - ``start_to_executor``: the command started -> the executor constructed (Python and
      Snakemake start-up, parsing, the DAG);
    - ``executor_to_first_job``: -> the first job handed over (the first scheduling
      round, the cluster's start);
    - ``dispatch``: -> the last job the executor ran reported to Snakemake;
    - ``target_rule``: -> Snakemake called the executor's shutdown (what Snakemake does
      after the last job: the local target rule, ``rule all``, and its bookkeeping);
    - ``shutdown``: the executor's shutdown;
    - ``exit``: -> the process ended.
    """
    if events.init is None or not events.submits or not events.told or events.shutdown is None:
        return None
    first, last = min(events.submits.values()), max(events.told.values())
    marks = [launched, events.init, first, last, events.shutdown[0], events.shutdown[1]]
    names = ("start_to_executor", "executor_to_first_job", "dispatch", "target_rule", "shutdown")
    found = {name: round(b - a, 3) for name, a, b in zip(names, marks[:-1], marks[1:], strict=True)}
    found["exit"] = round(launched + wall - events.shutdown[1], 3)
    return found
