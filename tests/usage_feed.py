"""A realistic feed for the usage report's collector, made up but shaped like a run: an
allocation of two 8-CPU nodes and a worker job of two more joining later; rules that
over-ask threads or memory, thin ones, one that varies widely, one with one job, a
failure, a lost job run again, jobs stopped at landing. Used by the report's tests and
by benchmarks/usage_report.py (which times the report for 100,000 jobs)."""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass

from snakemake_executor_plugin_dask_slurm.report.usage import (
    Ended,
    Handover,
    RunFacts,
    UsageCollector,
)
from snakemake_executor_plugin_dask_slurm.worker.wire import Usage

T0 = 1_790_000_000.0
#: The workers' own peak RSS, MB: a job's peak below it is known only as "at most".
WORKER_RSS = 70.0


@dataclass(frozen=True)
class RuleShape:
    name: str
    share: float  # of the jobs
    threads: int
    mem_mb: float | None
    runtime: float | None
    cores: float  # used on average
    rss_mb: float
    wall: tuple[float, float]  # seconds, uniform
    way: str = "direct"


RULES = (
    RuleShape("align", 0.10, 8, 16000, None, 1.3, 1200, (20, 40)),
    RuleShape("sort", 0.10, 2, None, None, 1.9, 300, (4, 6)),
    RuleShape("count", 0.69, 1, 1000, None, 0.95, 40, (0.01, 0.05)),
    RuleShape("call", 0.10, 4, 8000, 60, 3.6, 7000, (2, 20)),
    RuleShape("plot", 0.0, 1, None, None, 0.9, 180, (3, 3.5), "warm"),
)
WORKERS = (  # name, host, cpus, joins at, retires when idle?, SLURM job
    ("n1", "n1", 8, 0.0, False, "4242"),
    ("n2", "n2", 8, 0.0, False, "4242"),
    ("j4250-n3", "n3", 8, 60.0, True, "4250"),
    ("j4250-n4", "n4", 8, 60.0, True, "4250"),
)
#: Seconds a worker job's worker stays idle before it retires.
IDLE = 5.0


def feed(jobs: int, seed: int = 1) -> tuple[UsageCollector, RunFacts]:
    """A collector fed with ``jobs`` job attempts (plus one rerun), and the run's facts."""
    rng = random.Random(seed)
    shapes = [s for s in RULES for _ in range(max(0, round(s.share * jobs)))]
    shapes += [RULES[2]] * (jobs - 1 - len(shapes)) + [RULES[4]]  # plot: one job
    rng.shuffle(shapes)
    collector = UsageCollector()
    free = {name: [joins] * cpus for name, _, cpus, joins, _, _ in WORKERS}
    placed = []
    for jobid, shape in enumerate(shapes, start=1):
        worker = min(free, key=lambda w: sorted(free[w])[shape.threads - 1])
        slots = free[worker]
        start = sorted(slots)[shape.threads - 1] + rng.uniform(0.001, 0.01)
        wall = rng.uniform(*shape.wall)
        if shape.name == "call" and rng.random() < 0.05:
            wall *= 12  # a few long ones
        for _ in range(shape.threads):
            heapq.heappop(slots)
        for _ in range(shape.threads):
            heapq.heappush(slots, start + wall)
        placed.append((jobid, shape, worker, start, wall))
    end = max(start + wall for _, _, _, start, wall in placed) + 1.0
    hosts = {name: (host, job) for name, host, _, _, _, job in WORKERS}
    for name, host, cpus, joins, retires, job in WORKERS:
        collector.worker_joined(name, host, cpus, 64_000, job, at=T0 + joins)
        last = max((s + w for _, _, on, s, w in placed if on == name), default=joins)
        if retires and last + IDLE < end:
            collector.worker_left(name, at=T0 + last + IDLE)
    failed = {placed[len(placed) // 3][0]}
    lost = placed[len(placed) // 2][0]
    stopped = {p[0] for p in placed[-3:]}
    for jobid, shape, worker, start, wall in placed:
        key = f"{shape.name}-{jobid}-a1"
        handed = T0 + start - rng.uniform(0.001, 0.05)
        collector.handed_over(
            Handover(
                key,
                shape.name,
                jobid,
                1,
                shape.way,
                shape.threads,
                shape.mem_mb,
                shape.runtime,
                handed,
                f"sample=s{jobid % 97},chunk={jobid}",
            )
        )
        cpu = wall * shape.cores * rng.uniform(0.9, 1.1)
        rss = shape.rss_mb * rng.uniform(0.7, 1.0) * (3 if wall > 60 else 1)
        host, slurm_job = hosts[worker]
        rss, floor = max(rss, WORKER_RSS) * 1024, WORKER_RSS * 1024
        usage = Usage(host, worker, slurm_job, T0 + start, wall, cpu, int(rss), int(floor))
        if jobid == lost:
            collector.ended(key, Ended(False, problem="its Dask worker died", lost_on=worker))
            collector.rerun(key, f"{key}-r1")
            collector.ended(f"{key}-r1", Ended(True, usage))
            continue
        if jobid in stopped:
            landing = "the run is landing before the allocation's time limit"
            collector.ended(key, Ended(False, usage, returncode=-15, stop=landing))
            continue
        if jobid in failed:
            collector.ended(key, Ended(False, usage, returncode=1))
            continue
        collector.ended(key, Ended(True, usage))
    run = RunFacts(T0, T0 + end, "srun", "4242", "snakemake --executor dask-slurm --jobs 500")
    return collector, run
