"""The worker's task runner alone: ``worker.task.run_task`` of thin jobs, p50 and p90.

    .venv/bin/python benchmarks/task_runner.py [JOBS]

Runs ``true`` (silent) and ``echo hello`` (prints a line) JOBS times each (default 300,
after 20 of warm-up) in a temporary directory, and prints the time per job and how many
job logs were left (a silent success leaves none: docs/further.md). To compare two
versions, run it with ``PYTHONPATH`` pointing at each checkout (the runner is standard
library only).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

from snakemake_executor_plugin_dask_slurm.worker import task
from snakemake_executor_plugin_dask_slurm.worker.wire import TaskSpec


def one(directory: str, key: str, script: str) -> float:
    spec = TaskSpec(
        key, ("/bin/bash", "-c", script), directory, (), f"{directory}/logs/{key}.log", None
    )
    began = time.perf_counter()
    task.run_task(spec)
    return time.perf_counter() - began


def main() -> None:
    jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    print(f"task runner: {task.__file__}")
    for script in ("true", "echo hello"):
        with tempfile.TemporaryDirectory() as directory:
            for i in range(20):
                one(directory, f"warm{i}", script)
            for name in (
                os.listdir(f"{directory}/logs") if os.path.isdir(f"{directory}/logs") else []
            ):
                os.unlink(f"{directory}/logs/{name}")
            times = sorted(one(directory, f"k{i}", script) for i in range(jobs))
            logs = f"{directory}/logs"
            left = len(os.listdir(logs)) if os.path.isdir(logs) else 0
            p50, p90 = statistics.median(times), times[int(0.9 * len(times))]
            print(f"{script!r}: p50 {p50 * 1e3:.2f} ms, p90 {p90 * 1e3:.2f} ms; logs left: {left}")


if __name__ == "__main__":
    main()
