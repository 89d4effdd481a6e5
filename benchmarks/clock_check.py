"""What every worker's clock costs on the hot path, per job, on Snakemake's scheduling
thread (:class:`..dispatch.intake.Intake`): nothing without a time limit; with the run's
own clock, :meth:`Placement.check` (the allocation's check) and the task's ``needs``; with
worker jobs of a time limit, also the runway point the job asks Dask for.

    .venv/bin/python benchmarks/clock_check.py

Prints microseconds per job (compare: a thin rule costs about 4,000 µs end to end). A
benchmark, not a test: it exits 0 whatever the figures are.
"""

from __future__ import annotations

import sys
import time
import timeit
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from snakemake_executor_plugin_dask_slurm.dispatch.clock.allocation import (
    AllocationClock,
    RunControls,
)
from snakemake_executor_plugin_dask_slurm.dispatch.clock.placement import Placement
from snakemake_executor_plugin_dask_slurm.dispatch.clock.policy import AllocationEnd
from snakemake_executor_plugin_dask_slurm.dispatch.registry import JobRegistry
from snakemake_executor_plugin_dask_slurm.worker.clock import plan_runway

JOBS = 10_000
ROUNDS = 5


def per_job(placement: Placement | None, jobs: list[Any]) -> float:
    """Microseconds per job of what Intake.take adds for ``placement`` (None: nothing)."""

    def take() -> None:
        now = time.time()
        needs: dict[str, float | None] = {}
        for job in jobs:
            if placement is None:
                continue
            _, seconds = placement.check(job, "k")
            needs["k"] = placement.needs(seconds)  # into the TaskSpec it is built with
            request = {"cpus": 1.0}
            runway = placement.runway_name(seconds, now)
            if runway is not None:
                request[runway] = 1.0

    return timeit.timeit(take, number=ROUNDS) / ROUNDS / len(jobs) * 1e6


def main() -> int:
    now = time.time()
    controls = RunControls(lambda keys: None, lambda: None)
    end = AllocationEnd(now + 3600, 120, 30, "benchmark")
    clock = AllocationClock(end, 120, None, JobRegistry(), controls, print)
    registry = JobRegistry()
    runway = plan_runway(7200.0, None, False, 120.0, 30.0)
    ways = {
        "no time limit (local mode, no limit)": None,
        "the run's own clock (srun mode)": Placement(clock, None, registry.quiet),
        "worker jobs' runway (sbatch mode)": Placement(None, runway, registry.quiet),
    }
    for label, resources in (("runtime given", {"runtime": 1}), ("no runtime", {})):
        jobs = [SimpleNamespace(name="thin", resources=resources) for _ in range(JOBS)]
        alone = timeit.timeit(lambda js=jobs: [clock.check(j, "k") for j in js], number=ROUNDS)
        print(f"(before issue 24: AllocationClock.check alone, {label}: "
              f"{alone / ROUNDS / JOBS * 1e6:.2f} µs per job)")  # fmt: skip
        for way, placement in ways.items():
            print(f"{way}, {label}: {per_job(placement, jobs):.2f} µs per job")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
