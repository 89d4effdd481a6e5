"""What the usage report costs: per job on the worker and on Snakemake's side, and writing
the report at the end of a run of 1,000 to 100,000 jobs (its time and the page's size).

    .venv/bin/python benchmarks/usage_report.py [--jobs 1000,10000,100000] [--runs 300]

Prints its figures; asserts nothing (the targets: the report for 100,000 jobs written in
under 10 s, the page under 20 MB; the per-job costs in microseconds).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from snakemake_executor_plugin_dask_slurm.report.usage import (  # noqa: E402
    Ended,
    Handover,
    UsageCollector,
)
from snakemake_executor_plugin_dask_slurm.worker import task as worker_task  # noqa: E402
from snakemake_executor_plugin_dask_slurm.worker.wire import TaskSpec, Usage  # noqa: E402


def worker_cost(runs: int) -> None:
    """run_measured (os.wait4 and the Usage) against the same runs with Popen.wait()."""
    measured = worker_task._reap

    def plain(proc: object) -> tuple[int, None]:
        return proc.wait(), None  # type: ignore[attr-defined]

    with tempfile.TemporaryDirectory() as tmp:
        spec = TaskSpec("k", ("/bin/true",), tmp, (), f"{tmp}/k.log", None)
        times: dict[str, list[float]] = {"wait4 + Usage": [], "Popen.wait()": []}
        for _ in range(runs):
            for name, reap in (("wait4 + Usage", measured), ("Popen.wait()", plain)):
                worker_task._reap = reap
                began = time.perf_counter()
                worker_task.run_measured(spec, "w")
                times[name].append(time.perf_counter() - began)
        worker_task._reap = measured
    for name, values in times.items():
        print(
            f"worker, one /bin/true job, {name}: median {statistics.median(values) * 1e6:,.0f} µs"
        )
    n = 100_000
    worker = timeit.timeit(lambda: Usage("h", "w", "1", 1.0, 2.0, 3.0, 4096).to_wire(), number=n)
    wire = Usage("h", "w", "1", 1.0, 2.0, 3.0, 4096).to_wire()
    client = timeit.timeit(lambda: Usage.from_wire(wire), number=n)
    print(
        f"the usage itself: {worker / n * 1e6:.2f} µs per job on the worker (Usage, to_wire), "
        f"{client / n * 1e6:.2f} µs on Snakemake's side (from_wire)"
    )


def collector_cost(jobs: int = 100_000) -> None:
    """handed_over + ended per job, on Snakemake's side."""
    collector = UsageCollector()
    usage = Usage("host", "worker", "123", 1.0, 2.0, 3.0, 4096)
    handovers = [Handover(f"r-{i}", "r", i, 1, "direct", 1, None, None, 0.0) for i in range(jobs)]
    ended = [(f"r-{i}", Ended(True, usage)) for i in range(jobs)]
    began = time.perf_counter()
    for h in handovers:
        collector.handed_over(h)
    middle = time.perf_counter()
    for key, e in ended:
        collector.ended(key, e)
    ended = time.perf_counter()
    print(
        f"collector: handed_over {(middle - began) / jobs * 1e6:.2f} µs, ended "
        f"{(ended - middle) / jobs * 1e6:.2f} µs per job"
    )


WRITE = """
import json, sys, time
from pathlib import Path
began = time.perf_counter()
sys.path.insert(0, {root!r})
from tests.usage_feed import feed
collector, run = feed({jobs})
fed = time.perf_counter()
lines = collector.write(Path({out!r}), run)
print(json.dumps({{"write_s": time.perf_counter() - fed}}))
"""


def report_cost(jobs: int) -> None:
    """Write the report of ``jobs`` attempts in a fresh interpreter (Bokeh's import
    included, as at the end of a run)."""
    with tempfile.TemporaryDirectory() as tmp:
        code = WRITE.format(root=str(ROOT), jobs=jobs, out=tmp)
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        figures = json.loads(done.stdout.strip().splitlines()[-1])
        sizes = {p.name: p.stat().st_size / 1e6 for p in Path(tmp).iterdir()}
    files = ", ".join(f"{name} {mb:.1f} MB" for name, mb in sorted(sizes.items()))
    print(f"report of {jobs:,} jobs: written in {figures['write_s']:.1f} s; {files}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="1000,10000,100000")
    parser.add_argument("--runs", type=int, default=300, help="worker-side runs of each kind")
    args = parser.parse_args()
    worker_cost(args.runs)
    collector_cost()
    for jobs in (int(n) for n in args.jobs.split(",")):
        report_cost(jobs)


if __name__ == "__main__":
    main()
