"""Growth benchmark on the project's SLURM test cluster: a farm that starts on one node and
grows with worker jobs.

    .venv/bin/python benchmarks/growth.py [--tasks 300] [--seconds 1] [--worker-jobs 2]

Inside ``salloc -N1 -w n1 --exclusive`` (4 CPUs), ``--tasks`` jobs of ``--seconds`` each
run with ``--dask-slurm-worker-jobs`` whole-node worker jobs allowed (n2: 4 CPUs, n3: 8). It
prints, from the run's own records (each job writes when it started and ended and on which
node; each worker's log says when it registered):

- backlog → first sbatch (the plugin's own summary line; by design at least 5 s);
- per worker job: queue wait, and worker registration → its first task (goal: < 1 s);
- makespan against the ideal for the capacity actually held (the CPU-seconds of work over
  the CPUs present at each moment, each worker counted from its registration).

A benchmark, not a test: it exits 0 whatever the figures are.
"""

from __future__ import annotations

import argparse
import datetime
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testcluster import cluster  # noqa: E402

SNAKEFILE = r"""
rule all:
    input: expand("out/{i}.txt", i=range(int(config["tasks"])))

rule task:
    output: "out/{i}.txt"
    params: seconds=config["seconds"]
    shell:
        "echo start $(date +%s.%N) $SLURMD_NODENAME > {output}; sleep {params.seconds}; "
        "echo end $(date +%s.%N) >> {output}"
"""

REGISTERED = re.compile(r"^(\S+ \S+) - distributed\.worker - INFO - +Registered to:")


def registration_times(logs: Path) -> dict[str, float]:
    """Node -> when its worker registered, from the worker-job step logs."""
    found: dict[str, float] = {}
    for log in logs.glob("worker-job-*-workers-*.log"):
        node = None
        for line in log.read_text(errors="replace").splitlines():
            named = re.search(r"Worker name: +j\d+-(\S+)", line)
            if named:
                node = named.group(1)
            m = REGISTERED.match(line)
            if m and node:
                stamp = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
                found.setdefault(node, stamp.timestamp())
    return found


def ideal_makespan(start: float, work: float, capacity: list[tuple[float, float]]) -> float:
    """Smallest T with the integral of the CPUs present over [start, start+T] >= work."""
    events = sorted(capacity)
    cpus, t, done = 0.0, start, 0.0
    for when, added in events:
        when = max(when, start)
        if cpus and done + cpus * (when - t) >= work:
            break
        done += cpus * (when - t)
        t, cpus = when, cpus + added
    return t - start + (work - done) / cpus


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--worker-jobs", type=int, default=2)
    args = parser.parse_args()
    info = cluster.start().info  # finds it running, or starts it
    env = info.env()
    workdir = Path(tempfile.mkdtemp(prefix="dask-slurm-growth-bench-"))
    (workdir / "Snakefile").write_text(SNAKEFILE)
    argv = [
        "salloc", "-N1", "-w", "n1", "--exclusive", "--time=30", f"--chdir={workdir}",
        str(ROOT / ".venv/bin/snakemake"), "--executor", "dask-slurm", "--jobs", "1000",
        "--dask-slurm-worker-jobs", str(args.worker_jobs),
        "--config", f"tasks={args.tasks}", f"seconds={args.seconds}",
    ]  # fmt: skip
    began = time.time()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
    wall = time.time() - began
    out = done.stdout + done.stderr
    if done.returncode != 0:
        print(out[-3000:])
        print(f"the run failed (exit {done.returncode}); workdir {workdir}")
        return 0
    starts: dict[str, list[float]] = {}
    first, last = float("inf"), 0.0
    for path in (workdir / "out").glob("*.txt"):
        start_line, end_line = path.read_text().splitlines()
        _, t0, node = start_line.split()
        t1 = float(end_line.split()[1])
        starts.setdefault(node, []).append(float(t0))
        first, last = min(first, float(t0)), max(last, t1)
    registered = registration_times(workdir / ".snakemake/dask-slurm/logs")
    node_cpus = {node.name: node.cpus for node in info.nodes}
    capacity = [(first, float(node_cpus["n1"]))] + [
        (t, float(node_cpus[node])) for node, t in registered.items()
    ]
    work = args.tasks * args.seconds
    ideal = ideal_makespan(first, work, capacity)
    summary = re.search(r"worker jobs: .*", out)
    print(f"workflow: {args.tasks} jobs of {args.seconds:g} s, wall {wall:.1f} s ({workdir})")
    print(f"plugin: {summary.group(0) if summary else 'no worker-job summary'}")
    joined = r"dask-slurm: (worker job \d+ started.*|worker job \d+: .*joined.*)"
    for line in re.findall(joined, out):
        print(f"  {line}")
    print(
        "| node | CPUs | registered (s after first job) | registration → first task s | jobs run |"
    )
    print("|---|---:|---:|---:|---:|")
    for node in sorted(starts):
        reg = registered.get(node)
        to_first = min(starts[node]) - reg if reg else None
        print(
            f"| {node} | {node_cpus.get(node, '?')} | "
            f"{f'{reg - first:.1f}' if reg else 'srun (start)'} | "
            f"{f'{to_first:.2f}' if to_first is not None else '-'} | {len(starts[node])} |"
        )
    makespan = last - first
    print(
        f"makespan {makespan:.1f} s; ideal for the capacity held {ideal:.1f} s; "
        f"ratio {makespan / ideal:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
