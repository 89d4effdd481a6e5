"""What the usage report costs: per job on the worker and on Snakemake's side, and writing
the report at the end of a run of 1,000 to 100,000 jobs (its time and the page's size).

    .venv/bin/python benchmarks/usage_report.py [--jobs 1000,10000,100000] [--runs 300]
    .venv/bin/python benchmarks/usage_report.py --page-only --jobs 1000 --repeats 5 [--base DIR]

Prints its figures; asserts nothing (the targets: the report for 100,000 jobs written in
under 10 s, the page under 20 MB; the per-job costs in microseconds; the page at the end
of a 1,000-job run at most 0.3 s, issue 32).

``--page-only``: only the page's cost at the end of a run (:func:`page_cost`), each
repeat in a fresh interpreter that imported distributed first, as Snakemake's process has
at the end of a run; ``--base DIR``: the same, interleaved, with the report's code of
another checkout (e.g. ``git archive main | tar -x -C DIR``) first on ``sys.path``.
"""

from __future__ import annotations

import argparse
import json
import os
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


PAGE = """
import json, sys, time
sys.path.insert(0, {root!r})
sys.path.insert(0, {code!r})
import distributed  # imported in Snakemake's process at the end of a run (numpy with it)
from pathlib import Path
from tests.usage_feed import feed
from snakemake_executor_plugin_dask_slurm.report.usage import page
from snakemake_executor_plugin_dask_slurm.report.usage.aggregate import allocation, rule_stats
collector, run = feed({jobs})
attempts = collector.attempts()
workers = collector.workers(attempts)
stats, alloc = rule_stats(attempts), allocation(attempts, workers, run)
out = {{}}
def clock():
    return time.perf_counter(), time.process_time()
if hasattr(page, "warm_up"):  # before the prebuilt page: Bokeh imported while jobs ran
    a = clock()
    page.warm_up()
    b = clock()
    out["import_s"], out["import_cpu"] = b[0] - a[0], b[1] - a[1]
a = clock()
text = page.page_html(attempts, workers, run, stats, alloc)
b = clock()
Path({out!r}).write_text(text)
out["page_s"], out["page_cpu"] = b[0] - a[0], b[1] - a[1]
out["bokeh"] = "bokeh" in sys.modules
out["size_mb"] = len(text.encode()) / 1e6
out["done_at"] = time.time()
print(json.dumps(out), flush=True)
"""


def page_cost(jobs: int, code: Path) -> dict[str, float]:
    """The page of ``jobs`` attempts, built with ``code``'s report in a fresh interpreter:
    Bokeh's import (before the prebuilt page: its warm-up, which a long run did on a
    thread while the jobs ran), building the page, and the interpreter's exit after it
    (what Bokeh's modules add to Snakemake's own exit)."""
    with tempfile.TemporaryDirectory() as tmp:
        code_text = PAGE.format(root=str(ROOT), code=str(code), jobs=jobs, out=f"{tmp}/p.html")
        done = subprocess.run(
            [sys.executable, "-c", code_text], capture_output=True, text=True, check=True
        )
        ended = time.time()
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    figures["exit_s"] = ended - figures.pop("done_at")
    return figures


def page_costs(jobs: int, repeats: int, base: Path | None) -> None:
    """:func:`page_cost` ``repeats`` times, with this checkout and ``base`` interleaved;
    every run's line, then the medians."""
    codes = {"this": ROOT, **({"base": base} if base is not None else {})}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in codes}
    for i in range(repeats):
        for name, code in codes.items():
            figures = page_cost(jobs, code)
            runs[name].append(figures)
            load = os.getloadavg()[0]
            print(f"{i + 1} {name}: " + json.dumps({k: round(v, 3) for k, v in figures.items()})
                  + f" load {load:.1f}", flush=True)  # fmt: skip
    for name, found in runs.items():
        keys = [k for k in found[0] if k != "bokeh"]
        medians = {k: statistics.median(f[k] for f in found) for k in keys}
        said = ", ".join(f"{k} {v:.3f}" for k, v in medians.items())
        print(f"page of {jobs:,} jobs, {name} ({codes[name]}), medians of {repeats}: {said}; "
              f"bokeh imported: {found[0]['bokeh']}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="1000,10000,100000")
    parser.add_argument("--runs", type=int, default=300, help="worker-side runs of each kind")
    parser.add_argument("--page-only", action="store_true", help="only the page's cost")
    parser.add_argument("--repeats", type=int, default=5, help="--page-only: fresh runs")
    parser.add_argument("--base", type=Path, help="--page-only: also time this checkout's")
    args = parser.parse_args()
    if args.page_only:
        for jobs in (int(n) for n in args.jobs.split(",")):
            page_costs(jobs, args.repeats, args.base.resolve() if args.base else None)
        return
    worker_cost(args.runs)
    collector_cost()
    for jobs in (int(n) for n in args.jobs.split(",")):
        report_cost(jobs)


if __name__ == "__main__":
    main()
