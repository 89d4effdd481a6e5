"""What the allocation's clock costs on the hot path: AllocationClock.check, which runs on
Snakemake's scheduling thread for every job when the allocation has a time limit.

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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from snakemake_executor_plugin_dask_slurm.dispatch.landing import AllocationClock, RunControls
from snakemake_executor_plugin_dask_slurm.dispatch.landing_policy import AllocationEnd
from snakemake_executor_plugin_dask_slurm.dispatch.registry import JobRegistry

JOBS = 10_000


def main() -> int:
    now = time.time()
    controls = RunControls(lambda keys: None, lambda: None)
    end = AllocationEnd(now + 3600, 120, 30, "benchmark")
    clock = AllocationClock(end, 120, None, JobRegistry(), controls, print)
    for label, resources in (("runtime given", {"runtime": 1}), ("no runtime", {})):
        jobs = [SimpleNamespace(name="thin", resources=resources) for _ in range(JOBS)]
        seconds = timeit.timeit(lambda js=jobs: [clock.check(j, "k") for j in js], number=5)
        print(f"AllocationClock.check, {label}: {seconds / 5 / JOBS * 1e6:.2f} µs per job")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
