"""A wide allocation on the project's SLURM test cluster: how full one Snakemake keeps it.

    .venv/bin/python benchmarks/wide.py [--nodes 16] [--cpus 64] [--jobs 5000]
        [--seconds 5] [--repeats 1] [--extra "--dask-slurm-no-usage-report"]

Brings the test cluster up as ``--nodes`` nodes of ``--cpus`` CPUs each (declared, not
real: SLURM's ``config_overrides``, all on this machine), runs ``--jobs`` jobs of ``sleep
--seconds`` inside ``salloc -N<nodes> --exclusive`` with ``--jobs <nodes x cpus>`` (plain
flags otherwise), and prints, from the run's usage report (``jobs.tsv``: when each job's
process started and how long it ran, measured on its worker):

- utilisation = the jobs' total wall time / (slots x the time from the first job's start to
  the last job's end) — what the issue's targets are written in;
- the fill: how long after the first job's start 50 %, 90 % and 100 % of the slots were
  first busy at once, and the most busy at once;
- Snakemake's own CPU (user + system of its process) per job, and jobs per second;
- the slot-seconds lost, split into the ramp (first start until the most slots were busy),
  the middle and the tail (last start to last end);
- the whole machine's CPU per job by process class (machine_cpu.py), for the whole run and
  for the first start to the last end, with the cores that CPU per job needs at the rate
  that keeps every slot busy (slots / seconds jobs per second). ``--out`` keeps it as JSON.

A cluster of another shape already up is stopped first (and the default one started again
at the end, if one was up before; ``--keep`` leaves the wide one up). A benchmark, not a
test: it exits 0 whatever the figures are.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))  # cpu_table's own imports

import cpu_table  # noqa: E402
from machine_cpu import CpuSampler  # noqa: E402

from benchmarks.measure import run_measured  # noqa: E402
from benchmarks.slurm import salloc_argv, scancel  # noqa: E402
from testcluster import cluster  # noqa: E402

SNAKEFILE = r"""
rule all:
    input: expand("out/{i}.txt", i=range(int(config["jobs"])))

rule sleeper:
    output: "out/{i}.txt"
    params: seconds=config["seconds"]
    shell: "sleep {params.seconds} > {output}"
"""


def spans(workdir: Path) -> list[tuple[float, float]]:
    """(start, end) of every job that succeeded, from the run's usage report."""
    table = workdir / ".snakemake/dask-slurm/usage/latest/jobs.tsv"
    if not table.exists():
        return []
    header, *rows = (line.split("\t") for line in table.read_text().splitlines())
    found = []
    for row in rows:
        job = dict(zip(header, row, strict=True))
        if job["rule"] == "sleeper" and job["outcome"] == "done":
            found.append((float(job["started"]), float(job["started"]) + float(job["wall_s"])))
    return found


def fill(jobs: list[tuple[float, float]], slots: int) -> tuple[dict[int, float | None], int]:
    """Seconds after the first start at which 50/90/100 % of the slots were first busy at
    once, and the most busy at once."""
    events = sorted([(s, 1) for s, _ in jobs] + [(e, -1) for _, e in jobs])
    first = events[0][0]
    busy, most = 0, 0
    reached: dict[int, float | None] = {50: None, 90: None, 100: None}
    for when, step in events:
        busy += step
        most = max(most, busy)
        for share in reached:
            if reached[share] is None and busy >= slots * share / 100:
                reached[share] = when - first
    return reached, most


def busy_between(jobs: list[tuple[float, float]], a: float, b: float) -> float:
    """Slot-seconds busy between ``a`` and ``b``."""
    return sum(max(0.0, min(e, b) - max(s, a)) for s, e in jobs)


def lost(jobs: list[tuple[float, float]], slots: int) -> dict[str, float]:
    """Slot-seconds not busy: in the ramp (the first start to the first end: only starts,
    no slot freed yet), the middle (to the last start) and the tail (to the last end)."""
    first, last_start = min(s for s, _ in jobs), max(s for s, _ in jobs)
    first_end, last_end = min(min(e for _, e in jobs), last_start), max(e for _, e in jobs)
    bounds = {
        "ramp": (first, first_end),
        "middle": (first_end, last_start),
        "tail": (last_start, last_end),
    }
    return {
        name: round(slots * (b - a) - busy_between(jobs, a, b), 1)
        for name, (a, b) in bounds.items()
    }


def utilisation(jobs: list[tuple[float, float]], slots: int) -> float:
    first = min(s for s, _ in jobs)
    last = max(e for _, e in jobs)
    return sum(e - s for s, e in jobs) / (slots * (last - first))


def ensure_cluster(nodes: int, cpus: int) -> tuple[cluster.ClusterInfo, bool]:
    """The wide cluster up; whether another one was up before (and was stopped)."""
    wanted = (cpus,) * nodes
    now = cluster.status()
    was_up = now.state != "down"
    if now.info is not None and tuple(n.cpus for n in now.info.nodes) == wanted:
        return now.info, False
    if was_up:
        cluster.stop()
    return cluster.start(wanted).info, was_up


def run_once(info: cluster.ClusterInfo, args: argparse.Namespace, slots: int) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="dask-slurm-wide-bench-"))
    (workdir / "Snakefile").write_text(SNAKEFILE)
    name = f"wide-{uuid.uuid4().hex[:6]}"
    snakemake = [
        sys.executable, str(ROOT / ".venv/bin/snakemake"), "--executor", "dask-slurm",
        "--jobs", str(slots), "--config", f"jobs={args.jobs}", f"seconds={args.seconds}",
        *shlex.split(args.extra),
    ]  # fmt: skip
    salloc = (f"-N{args.nodes}", "--exclusive", "--time=60", f"--chdir={workdir}")
    argv = salloc_argv(name, salloc, snakemake)
    env = info.env()
    bg = cpu_table.measure_background(args.background_seconds)
    print(f"background before the run: {bg.cores:.3f} cores busy (load {bg.load})", flush=True)
    sampler = CpuSampler(snakemake[1], interval=args.poll)
    measured = run_measured(
        argv, workdir, env, workdir / "run.log", args.timeout, snakemake[1],
        on_timeout=lambda: scancel(name, env), sampler=sampler,
    )  # fmt: skip
    jobs = spans(workdir)
    print(f"\nrun in {workdir} (exit {measured.returncode}, wall {measured.wall_seconds:.1f} s)")
    found: dict[str, Any] = {"workdir": str(workdir), "wall_seconds": measured.wall_seconds}
    if len(jobs) != args.jobs:
        print(
            f"{len(jobs)} of {args.jobs} jobs succeeded in the usage report; see {workdir}/run.log"
        )
        if not jobs:
            return found
    reached, most = fill(jobs, slots)
    first, last = min(s for s, _ in jobs), max(e for _, e in jobs)
    cpu = measured.snakemake.cpu_seconds
    at = ", ".join(
        f"{k} % at {v:.1f} s" if v is not None else f"{k} % never" for k, v in reached.items()
    )
    used = utilisation(jobs, slots)
    print(
        f"{len(jobs)} jobs of {args.seconds:g} s on {slots} slots ({args.nodes} x {args.cpus}): "
        f"utilisation {used:.1%}, first start to last end "
        f"{last - first:.1f} s (ideal {args.seconds * -(-args.jobs // slots):.1f} s), "
        f"{len(jobs) / (last - first):.0f} jobs/s"
    )
    print(f"busy slots: {at}; at most {most} at once")
    gaps = lost(jobs, slots)
    first_end, last_start = min(e for _, e in jobs), max(s for s, _ in jobs)
    wave = sum(1 for s, _ in jobs if s <= first_end)
    refill = (len(jobs) - wave) / max(last_start - first_end, 1e-9)
    print(
        f"{wave} jobs started before the first ended ({first_end - first:.1f} s); "
        f"then {refill:.0f} jobs/s until the last start"
    )
    print(
        "slot-seconds lost: "
        + ", ".join(f"{k} {v:,.0f}" for k, v in gaps.items())
        + f" (of {slots * (last - first):,.0f}); "
        + f"last start at {max(s for s, _ in jobs) - first:.1f} s"
    )
    if cpu is not None:
        print(f"Snakemake's process: {cpu:.1f} CPU-s, {1000 * cpu / len(jobs):.2f} ms per job")
    machine = cpu_table.summarize(
        sampler, bg, measured.launched_at, measured.ended_at, len(jobs), (first, last),
        "the first job's start to the last job's end (jobs.tsv)",
    )  # fmt: skip
    needed = slots / args.seconds
    print("\n".join(["", *cpu_table.table([("wide", measured.wall_seconds, machine)])]))
    for window, w in machine["windows"].items():
        cores = {k: round(w[f"{k}_ms"] * needed / 1000, 2) for k in CLASSES_SHOWN}
        print(
            f"{window}: at {needed:.0f} jobs/s (every slot busy) this CPU per job needs "
            + ", ".join(f"{k} {v:.2f}" for k, v in cores.items())
            + f" cores (of {machine['nproc']}); the Dask side's ms per job: "
            + ", ".join(f"{r} {w.get(f'dask.{r}_ms', 0):.2f}" for r in DASK_ROLES)
        )
    quiet = quiet_rates(sampler, jobs, args.nodes)
    if quiet:
        print(
            f"while jobs ran and none started or ended ({quiet['seconds']:.1f} s): "
            + ", ".join(f"{k} {v:.3f}" for k, v in quiet.items() if k != "seconds")
            + " cores"
        )
    found.update(
        quiet_cores=quiet,
        jobs=len(jobs), slots=slots, utilisation=round(used, 4), span_seconds=last - first,
        fill_seconds=reached, most_busy=most, lost_slot_seconds=gaps,
        starts_in_first_wave=wave, refill_jobs_per_second=round(refill, 1),
        snakemake_cpu_seconds=cpu, machine_cpu=machine,
    )  # fmt: skip
    return found


def quiet_rates(
    sampler: CpuSampler, jobs: list[tuple[float, float]], nodes: int
) -> dict[str, float]:
    """Each class's CPU rate (cores) between the last start and the first end, when the
    jobs outlast the dispatch (e.g. ``--jobs 1024 --seconds 20``): what the run's
    processes cost while nothing starts or ends (the workers' share also per worker)."""
    start = max(s for s, _ in jobs) + 0.5
    end = min(e for _, e in jobs) - 0.5
    if end - start < 2.0:
        return {}
    d = sampler.between(start, end)
    rates = {k: d.by_class[k] / d.t for k in ("snakemake", "dask", "jobs", "slurm", "harness")}
    rates |= {r: d.by_class[f"dask.{r}"] / d.t for r in ("scheduler", "worker", "supervisor")}
    rates["per worker"] = rates["worker"] / nodes
    return {"seconds": round(d.t, 2)} | {k: round(v, 4) for k, v in rates.items()}


CLASSES_SHOWN = ("net", "ours", "snakemake", "dask", "jobs", "slurm")
DASK_ROLES = ("scheduler", "worker", "supervisor", "fork")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--cpus", type=int, default=64)
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--extra", default="", help="more snakemake arguments, shell-split")
    parser.add_argument("--keep", action="store_true", help="leave the wide cluster up")
    parser.add_argument("--background-seconds", type=float, default=cpu_table.BACKGROUND_SECONDS)
    parser.add_argument("--poll", type=float, default=0.5, help="CPU sampler's poll seconds")
    parser.add_argument("--out", type=Path, default=None, help="write the figures here (JSON)")
    args = parser.parse_args()
    slots = args.nodes * args.cpus
    began = time.monotonic()
    info, restore = ensure_cluster(args.nodes, args.cpus)
    print(f"test cluster of {args.nodes} x {args.cpus} CPUs up in {time.monotonic() - began:.1f} s")
    runs = []
    try:
        for _ in range(args.repeats):
            runs.append(run_once(info, args, slots))
            if args.out is not None:
                args.out.write_text(json.dumps({"argv": sys.argv, "runs": runs}, indent=1) + "\n")
    finally:
        if not args.keep:
            cluster.stop()
            if restore:
                cluster.start()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
