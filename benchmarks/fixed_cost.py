"""What a run costs besides its jobs (issue 32): a workflow of one `shell:` job under the
plugin against Snakemake's local executor, paired, wall and CPU, and the plugin's phases.

    .venv/bin/python benchmarks/fixed_cost.py [--repeats 5] [--ways local,plugin,...]
        [--jobs 1]

Each repeat runs every way once, one after another in a fresh directory (interleaved, so
that the shared machine's load falls on all of them alike):

- ``local``: ``snakemake --cores 2 -q`` (Snakemake's local executor);
- ``plugin``: ``snakemake --executor dask-slurm --jobs 10 -q`` (local mode, plain flags);
- ``no-report``: the same with ``--dask-slurm-no-usage-report``;
- ``no-warm``: the same with ``--dask-slurm-no-warm`` (a run in which no job goes the warm
  way should not pay for the warm side);
- ``bare``: also ``--dask-slurm-no-warm --dask-slurm-insecure --dask-slurm-no-dashboard``.

Per run: the wall time from the launch to the exit of ``snakemake``; the CPU of every
process of the run (``RUSAGE_CHILDREN``: Snakemake, and what it reaped: Dask's scheduler,
supervisors and workers, the jobs); the job's start, from the job itself (it writes
``date +%s.%N``, so both executors are measured alike): the launch to the first job's
start and the last job's start to the exit. For the plugin, its own timings as well
(``worker/timing.py``'s events): Snakemake's start to the executor's (``init``), the
cluster's start (``cluster_start``), the usage report (``usage_report``), the cluster's
close (``cluster_close``), ``shutdown()`` and what follows it to the exit.

``--jobs N``: N independent jobs instead of one (``--jobs 1000``: the end of a 1,000-job
run). ``--workload``: ``shell`` (the default), ``script`` (each job a `script:` that writes
``time.time()``: ``--workload script --jobs 100 --slots 100`` is issue 32's "100 thin script:
rules with plain --jobs 100"), or ``group`` (four `shell:` members that each write their
start and sleep 2 s, in one group job, ``--group-components g=4``; the local executor, which
runs no groups, runs them as four jobs with ``--cores 4``, the plugin on
``--dask-slurm-cpus 4``). ``--slots N``: the plugin's ``--jobs`` (default 10).

``--base DIR``: an A/B run: every plugin way runs a second time, named
``<way>@base``, with ``PYTHONPATH=DIR`` (a checkout of another commit, e.g. ``git archive
main | tar -x -C DIR``), interleaved with the rest. Prints every run's line with the load
average, then the medians per way and the median of the paired differences against
``local``. Asserts nothing; exits 0 whatever the figures are.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

VENV_BIN = Path(sys.executable).parent
SNAKEMAKE = str(VENV_BIN / "snakemake")
ALL = """rule all:
    input: expand("out/{{i}}.txt", i=range({n}))
"""
SNAKEFILES = {
    "shell": ALL
    + """
rule one:
    output: "out/{{i}}.txt"
    shell: "date +%s.%N > {{output}}"
""",
    "script": ALL
    + """
rule one:
    output: "out/{{i}}.txt"
    script: "start.py"
""",
    "group": ALL
    + """
rule member:
    output: "out/{{i}}.txt"
    group: "g"
    shell: "date +%s.%N > {{output}}; sleep 2"
""",
}
SCRIPT = "import time\nopen(snakemake.output[0], 'w').write(repr(time.time()))\n"
#: What each workload adds to the local executor's and the plugin's arguments.
LOCAL_ARGS = {"shell": ("--cores", "2"), "script": ("--cores", "2"), "group": ("--cores", "4")}
PLUGIN_ARGS = {
    "shell": (),
    "script": (),
    "group": ("--group-components", "g=4", "--dask-slurm-cpus", "4"),
}
WAYS: dict[str, tuple[str, ...]] = {
    "local": (),
    "plugin": (),
    "no-report": ("--dask-slurm-no-usage-report",),
    "no-warm": ("--dask-slurm-no-warm",),
    "bare": (
        "--dask-slurm-no-usage-report",
        "--dask-slurm-no-warm",
        "--dask-slurm-insecure",
        "--dask-slurm-no-dashboard",
    ),
}


def argv(way: str, workload: str, slots: int) -> list[str]:
    """The command of one run of ``way`` on ``workload``."""
    if way == "local":
        return [SNAKEMAKE, *LOCAL_ARGS[workload], "-q"]
    plugin = ("--executor", "dask-slurm", "--jobs", str(slots), *PLUGIN_ARGS[workload])
    return [SNAKEMAKE, *plugin, *WAYS[way], "-q"]


EVENTS_ENV = "DASK_SLURM_TIMING_EVENTS"


@dataclass
class Run:
    way: str
    wall: float
    cpu: float
    #: Launch to the first job's start, the last job's start to the exit.
    to_first: float
    after_last: float
    #: The plugin's phases (seconds), by name; none for the local executor.
    phases: dict[str, float] = field(default_factory=dict)
    load: str = ""


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def plugin_phases(events: Path, launched: float, exited: float) -> dict[str, float]:
    """The plugin's phases from its timing events (see benchmarks/instrumented_snakemake.py
    for their names)."""
    found: dict[str, list[str]] = {}
    first_submit = None
    last_told = None
    for line in events.read_text().splitlines() if events.exists() else []:
        kind, *rest = line.split("\t")
        if kind == "submit" and first_submit is None:
            first_submit = float(rest[1])
        elif kind == "told":
            last_told = float(rest[2])
        else:
            found.setdefault(kind, rest)
    phases: dict[str, float] = {}
    if "init" in found:
        phases["launch->executor"] = float(found["init"][0]) - launched
    if "cluster_start" in found:
        phases["cluster_start"] = float(found["cluster_start"][0])
    if "ready" in found and first_submit is not None:
        phases["ready->submit"] = first_submit - float(found["ready"][0])
    if "usage_report" in found:
        phases["usage_report"] = float(found["usage_report"][1]) - float(found["usage_report"][0])
    if "cluster_close" in found:
        phases["cluster_close"] = float(found["cluster_close"][0])
    if "shutdown" in found:
        enter, leave = map(float, found["shutdown"])
        if last_told is not None:
            phases["last_told->shutdown"] = enter - last_told
        phases["shutdown"] = leave - enter
        phases["shutdown->exit"] = exited - leave
    return phases


def one_run(
    way: str, jobs: int, base: str | None = None, workload: str = "shell", slots: int = 10
) -> Run:
    """One run of ``way``; with ``base``, that checkout's plugin (``PYTHONPATH``)."""
    where = Path(tempfile.mkdtemp(prefix=f"fixed-cost-{way}-"))
    try:
        (where / "Snakefile").write_text(SNAKEFILES[workload].format(n=jobs))
        (where / "start.py").write_text(SCRIPT)
        command = argv(way, workload, slots)
        events = where / "events.tsv"
        env = dict(os.environ)
        env.pop(EVENTS_ENV, None)
        if base is not None:
            env["PYTHONPATH"] = base
        if way != "local":
            env[EVENTS_ENV] = str(events)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        launched = time.time()
        began = time.monotonic()
        done = subprocess.run(
            command, cwd=where, env=env, capture_output=True, text=True, timeout=3600
        )
        wall = time.monotonic() - began
        exited = launched + wall
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode:
            print(done.stdout[-3000:], done.stderr[-3000:])
            raise SystemExit(f"{' '.join(command)} failed in {where}")
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        starts = [float(p.read_text()) for p in (where / "out").iterdir()]
        return Run(
            way if base is None else f"{way}@base",
            wall,
            cpu,
            min(starts) - launched,
            exited - max(starts),
            plugin_phases(events, launched, exited),
            loadavg(),
        )
    finally:
        shutil.rmtree(where, ignore_errors=True)


def line(run: Run) -> str:
    phases = ", ".join(f"{k} {v:.2f}" for k, v in run.phases.items())
    return (
        f"{run.way}: wall {run.wall:.2f} s, CPU {run.cpu:.2f} s; launch->first job "
        f"{run.to_first:.2f} s, last job->exit {run.after_last:.2f} s"
        + (f"; {phases}" if phases else "")
        + f" (load {run.load})"
    )


def summary(runs: list[Run], ways: list[str]) -> None:
    print(f"\nmedians of {len(runs) // len(ways)} repeats:")
    by_way = {way: [r for r in runs if r.way == way] for way in ways}
    for way, mine in by_way.items():
        med = statistics.median
        phases = {k: med(r.phases[k] for r in mine if k in r.phases) for k in mine[0].phases}
        text = ", ".join(f"{k} {v:.2f}" for k, v in phases.items())
        print(
            f"{way}: wall {med(r.wall for r in mine):.2f} s, CPU {med(r.cpu for r in mine):.2f} "
            f"s; launch->first job {med(r.to_first for r in mine):.2f} s, last job->exit "
            f"{med(r.after_last for r in mine):.2f} s" + (f"; {text}" if text else "")
        )
        if way != "local" and "local" in by_way:
            pairs = list(zip(mine, by_way["local"], strict=True))
            print(
                f"  {way} - local, paired: wall +{med(a.wall - b.wall for a, b in pairs):.2f} s, "
                f"CPU +{med(a.cpu - b.cpu for a, b in pairs):.2f} s, first job "
                f"+{med(a.to_first - b.to_first for a, b in pairs):.2f} s, end "
                f"+{med(a.after_last - b.after_last for a, b in pairs):.2f} s"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--ways", default="local,plugin,no-report,bare")
    parser.add_argument("--jobs", type=int, default=1, help="independent jobs")
    parser.add_argument("--workload", choices=sorted(SNAKEFILES), default="shell")
    parser.add_argument("--slots", type=int, default=10, help="the plugin's --jobs")
    parser.add_argument("--base", help="A/B: also run every plugin way with PYTHONPATH=BASE")
    args = parser.parse_args()
    ways = args.ways.split(",")
    unknown = sorted(set(ways) - set(WAYS))
    if unknown:
        parser.error(f"unknown way(s) {', '.join(unknown)}; valid: {', '.join(WAYS)}")
    plan: list[tuple[str, str | None]] = [(way, None) for way in ways]
    if args.base:
        plan += [(way, str(Path(args.base).resolve())) for way in ways if way != "local"]
    runs = []
    for _ in range(args.repeats):
        for way, base in plan:
            jobs = 4 if args.workload == "group" else args.jobs
            runs.append(one_run(way, jobs, base, args.workload, args.slots))
            print(line(runs[-1]), flush=True)
    summary(runs, [way if base is None else f"{way}@base" for way, base in plan])


if __name__ == "__main__":
    main()
