"""The whole machine's CPU per job, as results.json figures and a table (issue 46).

``summarize`` turns one run's ``machine_cpu.CpuSampler`` into a plain dict (stored in
results.json as ``machine_cpu``): for two windows, ``run`` (the launch to the command's
exit) and ``steady`` (the first job's output to the last job's end: the dispatch phase),
the ms of CPU per job of the whole machine, its background, and each process class.
``table`` renders such dicts as one Markdown table, one row per (run, window), so rows
of later runs (after batching, say) can be appended to the same table.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from machine_cpu import CpuSampler, background, per_job

#: Seconds of the machine's background sampled before each run, with nothing of ours running.
BACKGROUND_SECONDS = 5.0
COLUMNS = (
    ("machine_ms", "whole machine"),
    ("background_ms", "background"),
    ("net_ms", "net of background"),
    ("ours_ms", "run's processes"),
    ("snakemake_ms", "Snakemake"),
    ("dask_ms", "Dask side"),
    ("jobs_ms", "jobs' own"),
    ("slurm_ms", "SLURM"),
    ("harness_ms", "harness"),
    ("others_ms", "others"),
    ("rest_ms", "rest"),
)


def load() -> list[float]:
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


@dataclass
class Background:
    """The machine's busy rate with nothing of ours running, and the load then."""

    cores: float
    seconds: float
    load: list[float]


def measure_background(seconds: float = BACKGROUND_SECONDS) -> Background:
    before = load()
    return Background(round(background(seconds), 4) if seconds > 0 else 0.0, seconds, before)


def summarize(
    sampler: CpuSampler,
    bg: Background,
    launched: float,
    ended: float,
    jobs: int,
    steady: tuple[float, float] | None,
    steady_label: str,
    tree_cpu_seconds: float | None = None,
) -> dict[str, Any]:
    """The plain figures of one run (see the module's docstring)."""
    windows = {"run": per_job(sampler, launched, ended, jobs, bg.cores)}
    if steady is not None and steady[1] > steady[0]:
        windows["steady"] = per_job(sampler, steady[0], steady[1], jobs, bg.cores)
    return {
        "jobs": jobs,
        "background_cores": bg.cores,
        "background_seconds": bg.seconds,
        "load_before_background": bg.load,
        "load_at_end": load(),
        "nproc": len(os.sched_getaffinity(0)),
        "poll_seconds": sampler.interval,
        "samples": len(sampler.samples),
        "tree_cpu_ms": None
        if tree_cpu_seconds is None
        else round(1000 * tree_cpu_seconds / jobs, 3),
        "steady_window": steady_label,
        "windows": windows,
    }


def header() -> list[str]:
    names = " | ".join(name for _, name in COLUMNS)
    return [
        f"| workload / contender | jobs | wall s | window | window s | {names} (ms CPU per job) "
        "| background cores | load before / end |",
        "|---|---:|---:|---|---:|" + "---:|" * len(COLUMNS) + "---:|---|",
    ]


def rows(label: str, wall: float | None, figures: dict[str, Any] | None) -> list[str]:
    """One table row per window of one run's ``machine_cpu`` figures."""
    if not figures:
        return []
    out = []
    for window, w in figures["windows"].items():
        cells = [
            label,
            f"{figures['jobs']:,}",
            "-" if wall is None else f"{wall:.1f}",
            window,
            f"{w['seconds']:.1f}",
            *(f"{w[key]:.2f}" for key, _ in COLUMNS),
            f"{figures['background_cores']:.2f}",
            f"{figures['load_before_background'][0]:.2f} / {figures['load_at_end'][0]:.2f}",
        ]
        out.append("| " + " | ".join(cells) + " |")
    return out


def table(entries: Sequence[tuple[str, float | None, dict[str, Any] | None]]) -> list[str]:
    """The table of every (label, wall, figures) given, each run's windows in turn."""
    lines = header()
    for label, wall, figures in entries:
        lines += rows(label, wall, figures)
    return lines


#: The docs/benchmarks.md table (issue 46): fewer columns, the Dask side split.
DOC_HEADER = (
    "| workload / contender | jobs | wall s | window s | whole machine | background | "
    "Snakemake | Dask side (scheduler + workers) | jobs' own | run's processes | "
    "others + rest | load before → end |",
    "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|",
)


def doc_rows(label: str, wall: float | None, figures: dict[str, Any]) -> list[str]:
    """docs/benchmarks.md's rows of one run: ms of CPU per job, one row per window."""
    out = []
    for window, w in figures["windows"].items():
        dask = f"{w['dask_ms']:.2f}"
        if w.get("dask.scheduler_ms"):  # split by role since the first runs of issue 46
            dask += f" ({w['dask.scheduler_ms']:.2f} + {w['dask.worker_ms']:.2f})"
        cells = [
            label,
            f"{figures['jobs']:,}",
            "-" if wall is None else f"{wall:.1f}",
            f"{window} {w['seconds']:.1f}",
            f"{w['machine_ms']:.2f}",
            f"{w['background_ms']:.2f} ({figures['background_cores']:.2f} cores)",
            f"{w['snakemake_ms']:.2f}",
            dask,
            f"{w['jobs_ms']:.2f}",
            f"**{w['ours_ms']:.2f}**",
            f"{w['others_ms'] + w['rest_ms']:.2f}",
            f"{figures['load_before_background'][0]:.1f} → {figures['load_at_end'][0]:.1f}",
        ]
        out.append("| " + " | ".join(cells) + " |")
    return out


def main(paths: Sequence[str]) -> int:
    """Print the docs table's rows of run.py's results.json or wide.py's --out files."""
    import json

    print("\n".join(DOC_HEADER))
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        for run in data["runs"]:
            if not run.get("machine_cpu"):
                continue
            label = (
                f"{run['workload']}-{run['rules']} {run['contender']}"
                if "contender" in run
                else (f"wide {run['slots']} slots, {run['utilisation']:.1%} busy")
            )
            print("\n".join(doc_rows(label, run.get("wall_seconds"), run["machine_cpu"])))
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
