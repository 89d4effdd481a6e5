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

With ``--jobs N --cpu-seconds S`` (the run's jobs and the Snakemake process's own user +
system CPU, e.g. ``snakemake_cpu_seconds`` in results.json) it also prints the process's
CPU per job by *category* (:data:`CATEGORIES`: job selection, ``Job.prepare``,
persistence, the job's log record and progress line, the executor's ``run_jobs``,
completion, ...), each split by the function below its anchor: every sample of every
thread is one share of S, so py-spy's own slowing of the run drops out.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

PLUGIN = "snakemake_executor_plugin_dask_slurm/"
#: (phase, start of "function (file" as py-spy prints a frame); the first hit wins.
PHASES = (
    ("executor start-up (cluster bring-up)", f"Executor.__post_init__ ({PLUGIN}"),
    ("executor shutdown (teardown)", f"Executor.shutdown ({PLUGIN}"),
    ("Snakemake run_job_pre (job info logging)", "AbstractExecutor.run_job_pre"),
    ("plugin run_jobs (submission)", f"Executor.run_jobs ({PLUGIN}"),
    ("plugin run_jobs (submission)", f"Submitter.submit ({PLUGIN}"),
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
    f"Submitter.submit ({PLUGIN}",
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


Frames = tuple[str, ...]


def _has(prefix: str) -> Callable[[Frames], int | None]:
    """The index of the outermost frame starting with ``prefix``."""

    def find(frames: Frames) -> int | None:
        return next((i for i, f in enumerate(frames) if f.startswith(prefix)), None)

    return find


def _called_from(caller: str, callee: str) -> Callable[[Frames], int | None]:
    """The index of a frame starting with ``callee`` right below one starting with
    ``caller`` (a logging call made by that very function, say)."""

    def find(frames: Frames) -> int | None:
        for i in range(1, len(frames)):
            if frames[i].startswith(callee) and frames[i - 1].startswith(caller):
                return i
        return None

    return find


SCHEDULE = "JobScheduler.schedule ("
POSTPROCESS = "JobScheduler._finish_jobs.<locals>.postprocess ("
FINISH_JOBS = "JobScheduler._finish_jobs ("
#: (category, where its samples are found); the first that matches a main-thread stack
#: wins, so the specific ones (persistence, logging, Job.prepare) come before the phases
#: they happen in. Snakemake 9.27.1's functions; other threads are a category each.
CATEGORIES: tuple[tuple[str, Callable[[Frames], int | None]], ...] = (
    ("persistence: incomplete marker (at submission)", _has("PersistenceBase.started (")),
    ("persistence: metadata record (at completion)", _has("PersistenceBase.finished (")),
    ("Job.prepare (directories, existing outputs)", _has("Job.prepare (")),
    ("Job.prepare (directories, existing outputs)", _has("replacements.<locals>.prepare_")),
    ("log: the job's info record (run_job_pre)", _has("AbstractExecutor.run_job_pre (")),
    ("log: progress line (Finished jobid, N of M)", _has("JobScheduler.progress (")),
    ("log: progress line (Finished jobid, N of M)", _called_from(POSTPROCESS, "Logger.")),
    ("log: scheduling round lines", _called_from(SCHEDULE, "Logger.")),
    ("job selection", _has("JobScheduler.job_selector (")),
    ("executor run_jobs (the plugin)", _has(f"Executor.run_jobs ({PLUGIN}")),
    ("executor run_jobs (the plugin)", _has("AbstractExecutor.run_jobs (")),
    ("completion (handle_job_success, postprocess, dag.finish)", _has(FINISH_JOBS)),
    ("completion: errors (_error_jobs)", _has("JobScheduler._error_jobs (")),
    ("scheduling round otherwise (ready jobs, resets, subsample)", _has(SCHEDULE)),
    ("start-up: DAG, workflow", _has("Workflow.execute (")),
    ("start-up: DAG, workflow", _has("args_to_api (")),
)


#: Frames that only pass a call on (the event loop Snakemake runs its coroutines in, the
#: harness's wrapper): a category's split names the first frame below its anchor that is
#: none of these.
PASSING_ON = (
    "Workflow.async_run (",
    "Runner.run (",
    "BaseEventLoop.",
    "Handle._run (",
    "Task.",
    POSTPROCESS,
    "_wrap_snakemake.",
    FINISH_JOBS,
    f"Submitter.submit ({PLUGIN}",
    "JobScheduler.job_selector.<locals>.run_selector (",
    "replacement.<locals>.",
)


#: Innermost frames of a thread that waits (an event loop's ``epoll_wait``, a pool
#: thread's queue) though py-spy, which guesses idleness, sampled it as active: not CPU.
WAITING = ("EpollSelector.select (", "_worker (concurrent/futures/thread.py")
WAITS = "(waiting: sampled as active by py-spy, not counted as CPU)"


def category(stack: Stack) -> tuple[str, str]:
    """(category, the function below its anchor) of a stack."""
    if stack.frames and stack.frames[-1].startswith(WAITING):
        return WAITS, ""
    if stack.thread != "MainThread":
        if stack.thread.startswith("thread ("):  # no name: the main thread as it exits
            return "other (imports, exit, no Python frame)", ""
        return f"thread: {stack.thread}", ""
    for label, find in CATEGORIES:
        index = find(stack.frames)
        if index is not None:
            below = [f for f in stack.frames[index + 1 :] if not f.startswith(PASSING_ON)]
            return label, f"{function(below[0])} ({source(below[0])})" if below else "(itself)"
    return "other (imports, exit, no Python frame)", ""


def per_job(stacks: Sequence[Stack], jobs: int, cpu_seconds: float, sub: int = 6) -> str:
    """CPU ms per job by category, every sample being an equal share of ``cpu_seconds``."""
    cats: Counter[str] = Counter()
    below: dict[str, Counter[str]] = {}
    for s in stacks:
        label, callee = category(s)
        cats[label] += s.count
        below.setdefault(label, Counter())[callee] += s.count
    waiting = cats.pop(WAITS, 0)
    total = cats.total() or 1
    per_sample_ms = cpu_seconds * 1000 / total / jobs
    lines = [
        f"CPU per job: {cpu_seconds:.1f} CPU-s / {jobs} jobs = "
        f"{cpu_seconds * 1000 / jobs:.3f} ms; {total} samples, "
        f"one = {per_sample_ms * 1000:.2f} µs/job; {waiting} more samples waiting"
    ]
    for label, n in cats.most_common():
        lines.append(f"  {n * per_sample_ms:7.3f} ms  {100 * n / total:5.1f} %  {label}")
        for callee, m in below[label].most_common(sub):
            if callee and m * per_sample_ms >= 0.005:
                lines.append(f"      {m * per_sample_ms:7.3f} ms  {callee}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("profile", type=Path)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--jobs", type=int, help="the run's jobs: print CPU ms per job")
    p.add_argument("--cpu-seconds", type=float, help="the Snakemake process's user + system")
    args = p.parse_args(argv)
    stacks = parse(args.profile.read_text().splitlines())
    if args.jobs and args.cpu_seconds:
        print(per_job(stacks, args.jobs, args.cpu_seconds), end="\n\n")
    print(summarize(stacks, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
