"""Summarize a py-spy raw profile of the Snakemake process (``run.py --profile``).

    .venv/bin/python benchmarks/profile_summary.py benchmarks/results/profiles/<run>.txt

The input is py-spy's ``--format raw --threads`` output: one line per distinct stack,
``thread (tid): name;frame;frame;... count``, frames root first, each
``function (file:line)``. py-spy samples only threads that are not idle, so the counts
say where the process spends CPU. Three views:

* per thread (the main thread runs Snakemake's scheduler and the executor's ``run_jobs``;
  "IO loop" is the Dask client's event loop; ``_wait_thread`` is the status loop);
* the main thread by *phase* (the outermost known function on the stack: Snakemake's job
  selection, its ``run_job_pre`` logging, the plugin's ``run_jobs``, Snakemake's
  post-processing of finished jobs, ...) and by *owner* (the package of the innermost
  frame: Snakemake, the plugin, Dask's client, ...);
* the functions with the most inclusive samples in the main thread.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

PLUGIN = "snakemake_executor_plugin_dask_slurm/"
#: (phase, start of "function (file" as py-spy prints a frame); the first hit wins.
PHASES = (
    ("executor start-up (cluster bring-up)", f"Executor.__post_init__ ({PLUGIN}"),
    ("executor shutdown (teardown)", f"Executor.shutdown ({PLUGIN}"),
    ("Snakemake run_job_pre (job info logging)", "AbstractExecutor.run_job_pre"),
    ("plugin run_jobs (submission)", f"Executor.run_jobs ({PLUGIN}"),
    ("plugin run_jobs (submission)", f"Executor._submit_chunk ({PLUGIN}"),
    ("Snakemake _finish_jobs (post-processing)", "JobScheduler._finish_jobs"),
    ("Snakemake job selection", "JobScheduler.job_selector"),
    ("Snakemake job selection", "JobScheduler._job_selector"),
    ("Snakemake scheduler loop (other)", "JobScheduler.schedule"),
    ("Snakemake DAG and workflow set-up", "Workflow.execute"),
    ("Snakemake DAG and workflow set-up", "args_to_api"),
)
OWNERS = (
    ("plugin", "snakemake_executor_plugin_dask_slurm/"),
    ("Snakemake interface packages", "snakemake_interface_"),
    ("Snakemake", "snakemake/"),
    ("Dask (distributed)", "distributed/"),
    ("Dask (dask)", "dask/"),
    ("tornado", "tornado/"),
    ("msgpack/cloudpickle", "msgpack/"),
    ("msgpack/cloudpickle", "cloudpickle/"),
    ("pulp (ILP)", "pulp/"),
    ("Python stdlib: logging", "logging/"),
    ("Python stdlib: asyncio", "asyncio/"),
    ("Python stdlib: threading", "threading.py"),
)
_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*):\d+\)$")


@dataclass(frozen=True)
class Stack:
    thread: str
    frames: tuple[str, ...]  # "function (file:line)", root first
    count: int


def parse(lines: Iterable[str]) -> list[Stack]:
    stacks = []
    for line in lines:
        line = line.rstrip("\n")
        if not line:
            continue
        body, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        parts = body.split(";")
        thread = re.sub(r"^thread \(\d+\): ", "", parts[0])
        stacks.append(Stack(thread, tuple(parts[1:]), int(count)))
    return stacks


def function(frame: str) -> str:
    match = _FRAME.match(frame)
    return match.group("func") if match else frame


def source(frame: str) -> str:
    match = _FRAME.match(frame)
    return match.group("file") if match else ""


def phase(stack: Stack) -> str:
    for label, name in PHASES:
        if any(f.startswith(name) for f in stack.frames):
            return label
    return "other (imports, start-up, native)"


def owner(stack: Stack) -> str:
    if not stack.frames:
        return "native / no Python frame"
    file = source(stack.frames[-1])
    for label, marker in OWNERS:
        if marker in file:
            return label
    return "Python stdlib/other" if file else "native / no Python frame"


def percent_table(counter: Counter[str], total: int, top: int | None = None) -> list[str]:
    return [f"  {100 * n / total:5.1f} %  {n:6d}  {name}" for name, n in counter.most_common(top)]


def inclusive(stacks: Sequence[Stack]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for stack in stacks:
        for name in {f"{function(f)} ({source(f)})" for f in stack.frames}:
            counts[name] += stack.count
    return counts


#: Functions whose direct callees are listed (where their time goes), as PHASES.
BREAKDOWNS = (
    f"Executor._submit_chunk ({PLUGIN}",
    f"Dispatcher.submit_many ({PLUGIN}",
    f"JobCommandBuilder.build_many ({PLUGIN}",
    "JobScheduler._finish_jobs.<locals>.postprocess (",
    "AbstractExecutor.run_job_pre (",
)


def callees(stacks: Sequence[Stack], name: str) -> Counter[str]:
    """Samples below the first frame starting with ``name``, by the function below it."""
    counts: Counter[str] = Counter()
    for stack in stacks:
        index = next((i for i, f in enumerate(stack.frames) if f.startswith(name)), None)
        if index is None:
            continue
        below = stack.frames[index + 1 :]
        label = f"{function(below[0])} ({source(below[0])})" if below else "(itself)"
        counts[label] += stack.count
    return counts


def summarize(stacks: Sequence[Stack], top: int) -> str:
    total = sum(s.count for s in stacks) or 1
    threads: Counter[str] = Counter()
    for s in stacks:
        threads[s.thread] += s.count
    main = [s for s in stacks if s.thread == "MainThread"]
    main_total = sum(s.count for s in main) or 1
    phases: Counter[str] = Counter()
    owners: Counter[str] = Counter()
    both: Counter[str] = Counter()
    for s in main:
        phases[phase(s)] += s.count
        owners[owner(s)] += s.count
        both[f"{phase(s)} / {owner(s)}"] += s.count
    lines = [f"{total} samples (non-idle); by thread:", *percent_table(threads, total)]
    lines += [f"\nmain thread ({main_total} samples) by phase:", *percent_table(phases, main_total)]
    lines += ["\nmain thread by owner of the innermost frame:", *percent_table(owners, main_total)]
    lines += ["\nmain thread by phase / owner:", *percent_table(both, main_total, top)]
    for name in BREAKDOWNS:
        below = callees(main, name)
        if below:
            share = 100 * below.total() / main_total
            lines += [f"\nmain thread, inside {name.split(' (')[0]} ({share:.1f} %):"]
            lines += percent_table(below, main_total, 12)
    lines += [f"\nmain thread, top {top} functions (inclusive):"]
    lines += percent_table(inclusive(main), main_total, top)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("profile", type=Path)
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args(argv)
    print(summarize(parse(args.profile.read_text().splitlines()), args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
