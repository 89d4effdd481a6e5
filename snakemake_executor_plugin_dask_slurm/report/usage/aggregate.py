"""From the attempts' rows to the report's figures (pure): per rule, the allocation's
utilisation per node, per worker job and overall, and its idle tail (usage over time:
:mod:`.over_time`).

Three CPU-second figures, everywhere:

- **granted**: what the farm's workers offered while they were in it (their CPUs x their
  time in the farm, up to the report);
- **reserved**: what the jobs asked for while they ran (threads x wall time);
- **used**: what the jobs used (their user + system CPU time, exact, from the kernel).

used / granted is the allocation's efficiency; reserved / granted how full the farm was
kept; used / reserved the jobs' CPU efficiency.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ...worker.wire import WAYS
from .rows import Attempt, RunFacts, WorkerSpan, worker_job_of
from .suggest import CORES_PERCENTILE, Suggestion, suggest

#: A rule's jobs "vary widely" in wall time when the longest took this many times the
#: median and at least VARY_MIN_SECONDS; in memory when the largest peak is this many
#: times the median and at least VARY_MIN_MB.
VARY_WALL_FACTOR = 10.0
VARY_MIN_SECONDS = 10.0
VARY_MEM_FACTOR = 4.0
VARY_MIN_MB = 100.0


def percentile(ordered: Sequence[float], p: float) -> float:
    """The ``p``-th percentile of sorted values, interpolated linearly (numpy's default)."""
    if not ordered:
        raise ValueError("percentile of no values")
    rank = (len(ordered) - 1) * p / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True, slots=True)
class RuleStats:
    """One row of ``rules.tsv``."""

    rule: str
    group: bool
    ways: str  # the attempts' ways, in WAYS' order: "direct", "warm+cold", ...
    attempts: int
    done: int
    failed: int
    lost: int
    stopped: int
    not_started: int
    threads: int  # asked (the most common, if its jobs asked differently)
    #: Which of "threads", "mem_mb", "runtime" its jobs asked differently (a function of
    #: the job, e.g. of its input's size).
    asked_differently: tuple[str, ...]
    mem_mb: float | None  # asked (the largest); None: none of its jobs asked
    jobs_without_mem: int
    runtime_min: float | None  # asked (the largest); None: none set
    wall_p50: float | None  # succeeded jobs, seconds
    wall_p95: float | None
    wall_max: float | None
    wait_p50: float | None  # hand-over to start, measured attempts
    cpu_s: float  # CPU seconds used, every measured attempt
    reserved_s: float  # threads x wall, every measured attempt
    cores_mean: float | None  # Σ CPU / Σ wall of succeeded jobs
    cores_p90: float | None  # per succeeded job, 90th percentile
    cpu_efficiency: float | None  # Σ CPU / Σ (threads x wall), succeeded jobs
    rss_p50_mb: float | None  # every attempt whose peak the kernel could tell
    rss_max_mb: float | None
    #: The largest "at most" of the attempts whose peak it could not tell (they stayed
    #: below their worker's own peak; see Attempt.rss_at_most_mb).
    rss_at_most_mb: float | None
    varies: tuple[str, ...]  # "wall time", "memory"
    suggestion: Suggestion
    members: tuple[str, ...] = ()  # a group job's members' rules

    @property
    def unused_s(self) -> float:
        """CPU seconds reserved and not used: what over-asking cost."""
        return max(0.0, self.reserved_s - self.cpu_s)

    @property
    def peak_mb(self) -> float | None:
        """The most memory an attempt may have used: the largest exact peak, or the
        largest "at most" if that is higher."""
        found = [v for v in (self.rss_max_mb, self.rss_at_most_mb) if v is not None]
        return max(found) if found else None

    @property
    def mem_use(self) -> float | None:
        peak = self.peak_mb
        if peak is None or not self.mem_mb:
            return None
        return peak / self.mem_mb


def rule_stats(attempts: Iterable[Attempt]) -> list[RuleStats]:
    """Per rule, the rows of ``rules.tsv``: the most CPU reserved and unused first."""
    by_rule: dict[str, list[Attempt]] = {}
    for a in attempts:
        by_rule.setdefault(a.rule, []).append(a)
    stats = [_one_rule(rule, rows) for rule, rows in by_rule.items()]
    stats.sort(key=lambda s: (-s.unused_s, s.rule))
    return stats


def _sorted(values: Iterable[float | None]) -> list[float]:
    return sorted(v for v in values if v is not None)


def _one_rule(rule: str, rows: list[Attempt]) -> RuleStats:
    outcomes = Counter(a.outcome for a in rows)
    measured = [a for a in rows if a.wall is not None and a.cpu is not None]
    done = [a for a in measured if a.outcome == "done"]
    walls = _sorted(a.wall for a in done)
    rss = _sorted(a.max_rss_mb for a in measured)
    at_most = max(
        (a.rss_at_most_mb for a in measured if a.rss_at_most_mb is not None), default=None
    )
    cores = _sorted(a.cores for a in done)
    asked = _asked(rows)
    done_wall = sum(a.wall or 0.0 for a in done)
    done_cpu = sum(a.cpu or 0.0 for a in done)
    done_reserved = sum(a.threads * (a.wall or 0.0) for a in done)
    cpu_efficiency = done_cpu / done_reserved if done_reserved > 0 else None
    cores_p90 = percentile(cores, CORES_PERCENTILE) if cores else None
    return RuleStats(
        rule=rule,
        group=rows[0].group,
        ways="+".join(sorted({a.way for a in rows}, key=WAYS.index)),
        attempts=len(rows),
        done=outcomes["done"],
        failed=outcomes["failed"],
        lost=outcomes["lost"],
        stopped=outcomes["stopped"],
        not_started=outcomes["not-started"],
        threads=asked.threads,
        asked_differently=asked.differently,
        mem_mb=asked.mem_mb,
        jobs_without_mem=asked.without_mem,
        runtime_min=asked.runtime_min,
        wall_p50=percentile(walls, 50) if walls else None,
        wall_p95=percentile(walls, 95) if walls else None,
        wall_max=walls[-1] if walls else None,
        wait_p50=percentile(w, 50) if (w := _sorted(a.wait for a in measured)) else None,
        cpu_s=sum(a.cpu or 0.0 for a in measured),
        reserved_s=sum(a.threads * (a.wall or 0.0) for a in measured),
        cores_mean=done_cpu / done_wall if done_wall > 0 else None,
        cores_p90=cores_p90,
        cpu_efficiency=cpu_efficiency,
        rss_p50_mb=percentile(rss, 50) if rss else None,
        rss_max_mb=rss[-1] if rss else None,
        rss_at_most_mb=at_most,
        varies=_varies(walls, rss),
        suggestion=suggest(
            asked.threads,
            asked.mem_mb,
            asked.runtime_min,
            cpu_efficiency,
            cores_p90,
            rss[-1] if rss else None,
            walls[-1] if walls else None,
            at_most,
        ),
        members=rows[0].members,
    )


@dataclass(frozen=True, slots=True)
class _Asked:
    """What a rule's jobs asked for."""

    threads: int  # the most common
    mem_mb: float | None  # the largest; None: none of its jobs asked
    runtime_min: float | None  # the largest; None: none set
    differently: tuple[str, ...]  # which of "threads", "mem_mb", "runtime" its jobs varied
    without_mem: int  # jobs that asked no mem_mb


def _asked(rows: Sequence[Attempt]) -> _Asked:
    threads_seen = Counter(a.threads for a in rows)
    mems = [a.mem_mb for a in rows if a.mem_mb is not None]
    runtimes = [a.runtime_min for a in rows if a.runtime_min is not None]
    seen = (("threads", threads_seen), ("mem_mb", mems), ("runtime", runtimes))
    return _Asked(
        threads=threads_seen.most_common(1)[0][0],
        mem_mb=max(mems) if mems else None,
        runtime_min=max(runtimes) if runtimes else None,
        differently=tuple(name for name, values in seen if len(set(values)) > 1),
        without_mem=len(rows) - len(mems),
    )


def _varies(walls: Sequence[float], rss: Sequence[float]) -> tuple[str, ...]:
    """Which of wall time and memory vary widely among the jobs (both sorted)."""
    varies = []
    if (
        walls
        and walls[-1] >= VARY_MIN_SECONDS
        and walls[-1] > VARY_WALL_FACTOR * percentile(walls, 50)
    ):
        varies.append("wall time")
    if rss and rss[-1] >= VARY_MIN_MB and rss[-1] > VARY_MEM_FACTOR * percentile(rss, 50):
        varies.append("memory")
    return tuple(varies)


# -- the allocation -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Utilisation:
    """CPU seconds granted, reserved by jobs and used by them, for one part of the farm."""

    label: str
    granted_s: float
    reserved_s: float
    used_s: float
    cpus: float = 0.0  # the most CPUs it had at once
    estimated: bool = False  # a worker's size was not told (see WorkerSpan.estimated)

    @property
    def efficiency(self) -> float | None:
        """used / granted."""
        return self.used_s / self.granted_s if self.granted_s > 0 else None

    @property
    def occupancy(self) -> float | None:
        """reserved / granted: how full the farm was kept."""
        return self.reserved_s / self.granted_s if self.granted_s > 0 else None


@dataclass(frozen=True, slots=True)
class AllocationUse:
    """How the run used the CPUs it was granted (what SLURM granted is
    :class:`...slurm.allocation.Allocation`)."""

    overall: Utilisation
    by_node: tuple[Utilisation, ...]
    by_worker_job: tuple[Utilisation, ...]
    #: Seconds from the run's start to its first job's start.
    head_s: float | None
    #: Seconds from the last job's start to the last job's end: the farm waited on its
    #: last jobs, starting nothing.
    tail_s: float | None
    #: CPU seconds granted and not reserved during that tail.
    tail_idle_s: float | None
    first_start: float | None
    last_end: float | None


def granted_seconds(span: WorkerSpan, end: float, since: float | None = None) -> float:
    """CPU seconds ``span``'s worker offered up to ``end`` (from ``since``, if given)."""
    start = span.joined if since is None else max(span.joined, since)
    stop = min(span.left if span.left is not None else end, end)
    return span.cpus * max(0.0, stop - start)


def worker_job_label(span: WorkerSpan, run: RunFacts) -> str:
    """Which SLURM job a worker's CPUs came from, in words."""
    job = worker_job_of(span.name)
    if job is not None:
        return f"worker job {job}"
    slurm_job = span.slurm_job or run.allocation
    if not slurm_job:
        return "this machine" if run.mode in ("", "local") else "attached workers"
    if slurm_job == run.allocation:
        return f"allocation {slurm_job}"
    return f"SLURM job {slurm_job}"


def allocation(
    attempts: Sequence[Attempt], workers: Sequence[WorkerSpan], run: RunFacts
) -> AllocationUse:
    """Granted, reserved and used CPU seconds overall, per node and per worker job; the
    head and the idle tail."""
    measured = [a for a in attempts if a.wall is not None and a.started is not None]
    reserved: dict[str, float] = {}
    used: dict[str, float] = {}
    for a in measured:
        reserved[a.worker] = reserved.get(a.worker, 0.0) + a.threads * (a.wall or 0.0)
        used[a.worker] = used.get(a.worker, 0.0) + (a.cpu or 0.0)
    node: dict[str, list[WorkerSpan]] = {}
    job: dict[str, list[WorkerSpan]] = {}
    for span in workers:
        node.setdefault(span.host, []).append(span)
        job.setdefault(worker_job_label(span, run), []).append(span)

    def part(label: str, spans: list[WorkerSpan]) -> Utilisation:
        names = {s.name for s in spans}
        return Utilisation(
            label,
            sum(granted_seconds(s, run.ended) for s in spans),
            sum(reserved.get(n, 0.0) for n in names),
            sum(used.get(n, 0.0) for n in names),
            _most_at_once(spans, run.ended),
            any(s.estimated for s in spans),
        )

    ends = _ends(measured, workers)
    return AllocationUse(
        overall=_with_unnamed(part("overall", list(workers)), measured, workers),
        by_node=tuple(part(host or "?", spans) for host, spans in sorted(node.items())),
        by_worker_job=tuple(part(label, spans) for label, spans in sorted(job.items())),
        head_s=None if ends.first is None else max(0.0, ends.first - run.started),
        tail_s=ends.tail_s,
        tail_idle_s=ends.tail_idle_s,
        first_start=ends.first,
        last_end=ends.last_end,
    )


def _with_unnamed(
    overall: Utilisation, measured: Sequence[Attempt], workers: Sequence[WorkerSpan]
) -> Utilisation:
    """``overall`` with the jobs whose worker no span names (no usage name): they still
    count as used and reserved. (Jobs on workers nobody told of and that ran nothing
    cannot happen.)"""
    unnamed = [a for a in measured if a.worker not in {s.name for s in workers}]
    if not unnamed:
        return overall
    return Utilisation(
        overall.label,
        overall.granted_s,
        overall.reserved_s + sum(a.threads * (a.wall or 0.0) for a in unnamed),
        overall.used_s + sum(a.cpu or 0.0 for a in unnamed),
        overall.cpus,
        True,
    )


@dataclass(frozen=True, slots=True)
class _Ends:
    first: float | None  # the first job's start
    last_end: float | None
    tail_s: float | None  # the last job's start to the last job's end
    tail_idle_s: float | None  # CPU seconds granted and not reserved in that tail


def _ends(measured: Sequence[Attempt], workers: Sequence[WorkerSpan]) -> _Ends:
    starts = [a.started for a in measured if a.started is not None]
    ends = [a.finished for a in measured if a.finished is not None]
    first, last_start = (min(starts), max(starts)) if starts else (None, None)
    last_end = max(ends) if ends else None
    if last_start is None or last_end is None:
        return _Ends(first, last_end, None, None)
    granted = sum(
        granted_seconds(s, last_end, since=last_start) for s in workers if s.joined <= last_end
    )
    busy = sum(
        a.threads * max(0.0, min(a.finished or 0.0, last_end) - max(a.started or 0.0, last_start))
        for a in measured
    )
    return _Ends(first, last_end, max(0.0, last_end - last_start), max(0.0, granted - busy))


def _most_at_once(spans: Sequence[WorkerSpan], end: float) -> float:
    events = sorted(
        [(s.joined, s.cpus) for s in spans]
        + [((s.left if s.left is not None else end), -s.cpus) for s in spans]
    )
    now = most = 0.0
    for _, delta in events:
        now += delta
        most = max(most, now)
    return most
