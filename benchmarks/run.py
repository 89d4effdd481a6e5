"""Benchmark the dask-slurm executor against Snakemake's local executor and slurm-jobstep.

    .venv/bin/python benchmarks/run.py [--sizes 1000,10000] [--with-20000]
        [--contenders local-default,local-greedy,dask-local,dask-local-rec,dask-srun,
                      dask-srun-rec,jobstep]
        [--repeats 1] [--smoke] [--start-cluster] [--out benchmarks/results]

Runs every workload with every contender, interleaved (for each repeat, each workload,
every contender in turn, the order rotated per repeat and workload) so that drift of a
shared machine hits all of them alike. Writes results.json (figures), samples.json
(per-job latencies), results.md (tables) and PNG plots into --out, and prints the
tables. It is a benchmark, not a test: it exits 0 whatever the timings are, and non-zero
only if it could not run at all (bad arguments). See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import analysis
import cpu_table
import report
import results
import slurm
from contenders import CONTENDERS, LOCAL_NAMES, SALLOC_ARGS, Contender, parse_contenders
from machine_cpu import CpuSampler
from measure import Measured, Progress, run_measured
from results import RunResult
from workloads import Workload, check, ideal_makespan

HERE = Path(__file__).resolve().parent
WRAPPER = HERE / "instrumented_snakemake.py"
#: The plugin's debug hook (snakemake_executor_plugin_dask_slurm/worker/timing.py): its
#: timing events, and each task's start and end on the workers.
EVENTS_ENV = "DASK_SLURM_TIMING_EVENTS"
WORKER_DIR_ENV = "DASK_SLURM_TIMING_TASKS"
SMOKE_RULES = 50
SMOKE_FARM_TASKS = 12
SMOKE_PER_RULE_SNAKEMAKE_RULES = 3
#: py-spy: raw (collapsed) stacks of every thread, without pausing the process.
PY_SPY_ARGS = ("record", "--format", "raw", "--rate", "100", "--threads", "--nonblocking")
Samples = dict[str, dict[str, list[float]]]
#: Seconds to wait for other users' jobs to leave the SLURM test cluster before a run.
IDLE_TIMEOUT = 900.0
#: salloc's message when somebody cancels the allocation; such a run is tried again.
REVOKED = "has been revoked"
REVOKED_ATTEMPTS = 3


@dataclass(frozen=True)
class Plan:
    workloads: list[Workload]
    contenders: list[Contender]
    repeats: int
    cores: int
    timeout: float
    jobstep_rules: int

    def runs(self) -> list[tuple[int, Workload, Contender]]:
        """Every run in order: interleaved, contender order rotated each time."""
        order = []
        for repeat in range(self.repeats):
            for index, workload in enumerate(self.workloads):
                chosen = [c for c in self.contenders if self.runs_workload(c, workload)]
                shift = (repeat + index) % max(1, len(chosen))
                order += [(repeat, workload, c) for c in chosen[shift:] + chosen[:shift]]
        return order

    def runs_workload(self, contender: Contender, workload: Workload) -> bool:
        """Contenders that spawn a Snakemake per rule run only the small thin workload."""
        small = workload.kind == "thin" and workload.rules == self.jobstep_rules
        return small if contender.max_rules is not None else not small


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sizes", default="1000,10000", help="thin-rule counts (default 1000,10000)")
    p.add_argument("--with-20000", action="store_true", help="add N = 20,000")
    p.add_argument("--farm-tasks", type=int, default=200, help="task-farm size; 0: no farm")
    p.add_argument(
        "--jobstep-rules",
        type=int,
        default=30,
        help="thin rules for the contenders that start a Snakemake per rule: slurm-jobstep "
        "and the plugin's general way (default 30)",
    )
    p.add_argument(
        "--contenders",
        default=",".join(c.name for c in CONTENDERS),
        help="comma-separated, from: " + ", ".join(c.name for c in CONTENDERS),
    )
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--cores", type=int, default=None, help="--cores / --jobs (default: nproc)")
    p.add_argument(
        "--timeout",
        type=float,
        default=900.0,
        help="seconds per run (default 900); a run whose rate so far projects past 1.5 "
        "times that is stopped early",
    )
    p.add_argument(
        "--smoke",
        action="store_true",
        help=f"N = {SMOKE_RULES}, a {SMOKE_FARM_TASKS}-task farm, local contenders only "
        f"({SMOKE_PER_RULE_SNAKEMAKE_RULES} rules for those that start a Snakemake per rule)",
    )
    p.add_argument(
        "--no-machine-cpu",
        action="store_true",
        help="do not sample the whole machine's CPU per process class (machine_cpu.py)",
    )
    p.add_argument(
        "--background-seconds",
        type=float,
        default=None,
        help="seconds of the machine's background sampled before each run, with nothing of "
        f"ours running (default {cpu_table.BACKGROUND_SECONDS:g}; 1 with --smoke)",
    )
    p.add_argument("--start-cluster", action="store_true", help="start the SLURM test cluster")
    p.add_argument("--out", type=Path, default=HERE / "results")
    p.add_argument("--keep-workdirs", action="store_true")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--profile", action="store_true", help="record each run with py-spy (raw)")
    p.add_argument(
        "--report-only", action="store_true", help="redo results.md and plots from --out"
    )
    return p.parse_args(argv)


def make_plan(args: argparse.Namespace) -> Plan:
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    contenders = parse_contenders(args.contenders)
    farm_tasks, timeout, few = args.farm_tasks, args.timeout, args.jobstep_rules
    if args.smoke:
        sizes, farm_tasks, timeout = [SMOKE_RULES], min(farm_tasks, SMOKE_FARM_TASKS), 180.0
        few = SMOKE_PER_RULE_SNAKEMAKE_RULES
        contenders = [c for c in contenders if c.name in LOCAL_NAMES]
    if args.with_20000 and 20000 not in sizes:
        sizes.append(20000)
    workloads = [Workload("thin", n) for n in sorted(sizes)]
    if any(c.max_rules is not None for c in contenders):
        workloads.insert(0, Workload("thin", few))
    if farm_tasks > 0:
        workloads.append(Workload("farm", farm_tasks))
    cores = args.cores or len(os.sched_getaffinity(0))
    return Plan(workloads, contenders, args.repeats, cores, timeout, few)


def status_of(measured: Measured, correct: int, expected: int, timeout: float) -> str:
    if measured.projected_seconds is not None:
        return (
            f"stopped after {measured.wall_seconds:.0f} s: at its rate it needed "
            f"{measured.projected_seconds:.0f} s, far over the {timeout:.0f} s limit "
            f"({correct}/{expected} outputs)"
        )
    if measured.timed_out:
        return f"timed out after {timeout:.0f} s ({correct}/{expected} outputs)"
    if measured.returncode != 0:
        return f"failed: exit {measured.returncode} ({correct}/{expected} outputs)"
    if correct != expected:
        return f"failed: {correct}/{expected} outputs correct"
    return "ok"


class Runner:
    """Runs the plan's runs one by one and keeps their results."""

    def __init__(self, plan: Plan, out: Path, workroot: Path, args: argparse.Namespace):
        self.plan, self.out, self.workroot, self.args = plan, out, workroot, args
        self.cluster: slurm.TestCluster | None = None
        self.cluster_problem = ""
        self.results: list[RunResult] = []
        self.samples: Samples = {}

    def argv(self, contender: Contender, run_id: str) -> list[str]:
        slots = self.cluster.cpus if self.cluster else self.plan.cores
        argv = [sys.executable, str(WRAPPER), *contender.snakemake_args(self.plan.cores, slots)]
        if not self.args.profile:
            return argv
        spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        profile = self.out / "profiles" / f"{run_id}.txt"
        profile.parent.mkdir(parents=True, exist_ok=True)
        return [spy, *PY_SPY_ARGS, "-o", str(profile), "--", *argv]

    def run(self, repeat: int, workload: Workload, contender: Contender) -> RunResult:
        if not contender.in_allocation:
            return self.attempt(repeat, workload, contender)
        result = RunResult(workload.kind, workload.rules, contender.name, repeat, "ok")
        for _ in range(REVOKED_ATTEMPTS):
            if self.cluster is None:
                result.status = f"skipped: {self.cluster_problem}"
                return result
            busy = slurm.wait_until_idle(self.cluster.env, IDLE_TIMEOUT)
            if busy:
                result.status = (
                    f"skipped: the SLURM test cluster stayed busy with other jobs "
                    f"({', '.join(busy)}) for {IDLE_TIMEOUT:.0f} s"
                )
                return result
            result = self.attempt(repeat, workload, contender)
            ours = result.status.startswith(("timed out", "stopped"))  # we scancelled it
            if (
                not result.ok
                and not ours
                and REVOKED in Path(result.log).read_text("utf-8", "replace")
            ):
                result.status = f"{result.status}; allocation cancelled from outside"
                print(f"{result.run_id}: allocation cancelled from outside; again", flush=True)
                continue
            break
        return result

    def attempt(self, repeat: int, workload: Workload, contender: Contender) -> RunResult:
        result = RunResult(workload.kind, workload.rules, contender.name, repeat, "ok")
        workdir = self.workroot / result.run_id
        shutil.rmtree(workdir, ignore_errors=True)
        workload.write(workdir)
        events = workdir / "events.tsv"
        argv = self.argv(contender, result.run_id)
        if contender.in_allocation and self.cluster is not None:
            env = dict(self.cluster.env)
        else:
            env = slurm.clean_environment(os.environ)
        env.update(contender.env)
        if contender.dask:
            env[EVENTS_ENV] = str(events)
            env[WORKER_DIR_ENV] = str(workdir / "worker-tasks")
        job_name = f"dask-slurm-bench-{uuid.uuid4().hex[:8]}"
        if contender.in_allocation:
            argv = slurm.salloc_argv(job_name, SALLOC_ARGS, argv)
        if contender.max_rules is not None and "SLURM_CONF" in env:
            shim = slurm.srun_shim(workdir / "srun-shim", env)
            env["PATH"] = f"{shim}{os.pathsep}{env.get('PATH', os.defpath)}"
        log = self.out / "logs" / f"{result.run_id}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        result.argv, result.log, result.profiled = argv, str(log), self.args.profile
        result.plugin_revision = results.plugin_revision(HERE.parent)
        bg, sampler = None, None
        if not self.args.no_machine_cpu:
            seconds = self.args.background_seconds
            if seconds is None:
                seconds = 1.0 if self.args.smoke else cpu_table.BACKGROUND_SECONDS
            bg = cpu_table.measure_background(seconds)
            sampler = CpuSampler(str(WRAPPER))
        launched = time.time()
        measured = run_measured(
            argv,
            workdir,
            env,
            log,
            self.plan.timeout,
            str(WRAPPER),
            progress=Progress(lambda: workload.outputs_written(workdir), workload.rules),
            on_timeout=(lambda: slurm.scancel(job_name, env)) if contender.in_allocation else None,
            sampler=sampler,
        )
        self.record(result, measured, workload, contender, events, workdir, launched)
        if sampler is not None and bg is not None:
            result.machine_cpu = cpu_table.summarize(
                sampler,
                bg,
                measured.launched_at,
                measured.ended_at,
                result.outputs_correct or workload.outputs_written(workdir),
                output_window(workload, workdir),
                "the first job's output written to the last one's",
                measured.tree_cpu_seconds,
            )
        if not self.args.keep_workdirs:
            shutil.rmtree(workdir, ignore_errors=True)
        return result

    def record(
        self,
        result: RunResult,
        measured: Measured,
        workload: Workload,
        contender: Contender,
        events_path: Path,
        workdir: Path,
        launched: float,
    ) -> None:
        produced = check(workload, workdir)
        result.outputs_expected, result.outputs_correct = produced.expected, produced.correct
        result.status = status_of(measured, produced.correct, produced.expected, self.plan.timeout)
        result.wall_seconds = round(measured.wall_seconds, 3)
        result.snakemake_peak_rss_mb = measured.snakemake.rss_mb
        result.snakemake_cpu_seconds = measured.snakemake.cpu_seconds
        result.scheduler_peak_rss_mb = measured.scheduler.rss_mb
        result.scheduler_cpu_seconds = measured.scheduler.cpu_seconds
        result.leftovers = measured.leftovers
        result.slots = self.slots(contender)
        if contender.dask:
            events = analysis.parse_events(events_path, workdir / "worker-tasks")
            self.record_events(result, events)
            result.phases = analysis.phases(events, launched, measured.wall_seconds)
        if workload.kind == "farm" and result.slots:
            result.makespan_seconds = analysis.makespan(produced.task_spans)
            result.ideal_makespan_seconds = ideal_makespan(workload.durations(), result.slots)

    def slots(self, contender: Contender) -> int | None:
        if contender.max_rules is not None and not contender.dask:
            return None  # slurm-jobstep: one rule at a time whatever it is given
        if contender.in_allocation:
            return self.cluster.cpus if self.cluster else None
        return self.plan.cores

    def record_events(self, result: RunResult, events: analysis.Events) -> None:
        result.ran_twice, result.noticed_twice = events.ran_twice, events.noticed_twice
        result.bringup_seconds = events.bringup_seconds
        result.teardown_seconds = events.teardown_seconds
        result.cluster_start_seconds = events.cluster_start
        result.cluster_close_seconds = events.cluster_close
        jobs = analysis.spans(events)
        ends = analysis.task_ends(events)
        samples = {
            "submit_to_start": analysis.start_latencies(jobs, events.slots or 1),
            "submit_to_start_raw": analysis.raw_start_latencies(jobs),
            "end_to_told": analysis.intervals(ends, events.told),
            "end_to_noticed": analysis.intervals(ends, events.noticed),
            "noticed_to_reporting": analysis.intervals(events.noticed, events.reporting),
            "reporting_to_told": analysis.intervals(events.reporting, events.told),
            "task_duration": [end - start for start, end in events.tasks.values()],
            "snakemake_lock_hold": [seconds for seconds, _ in events.finish_rounds],
        }
        result.latency = {name: analysis.summarize(v) for name, v in samples.items()}
        jobs_per_round = [jobs for _, jobs in events.finish_rounds]
        result.latency["snakemake_lock_hold"]["max_jobs"] = max(jobs_per_round, default=None)
        self.samples[result.run_id] = {
            name: [round(x * 1000, 3) for x in v] for name, v in samples.items()
        }


def output_window(workload: Workload, workdir: Path) -> tuple[float, float] | None:
    """(first, last) modification time of the run's outputs: its jobs' dispatch phase."""
    folder = workdir / ("out" if workload.kind == "thin" else "farm")
    try:
        times = [entry.stat().st_mtime for entry in os.scandir(folder)]
    except OSError:
        return None
    return (min(times), max(times)) if times else None


def one_line(r: RunResult) -> str:
    if r.status.startswith("skipped"):
        return f"{r.run_id}: {r.status}"
    rate = r.rules_per_second
    figures = f"wall {r.wall_seconds or 0:.1f} s" + (f", {rate:.1f} rules/s" if rate else "")
    lat = r.latency.get("submit_to_start")
    if lat and lat.get("p50_ms") is not None:
        figures += f", submit→start p50 {lat['p50_ms']:.1f} ms p99 {lat['p99_ms']:.1f} ms"
    for name, label in (("end_to_noticed", "end→noticed"), ("end_to_told", "end→told")):
        lat = r.latency.get(name)
        if lat and lat.get("p50_ms") is not None:
            figures += f", {label} p50 {lat['p50_ms']:.1f} ms p99 {lat['p99_ms']:.1f} ms"
    hold = r.latency.get("snakemake_lock_hold")
    if hold and hold.get("max_ms") is not None:
        figures += (
            f", Snakemake's post-processing held its lock up to {hold['max_ms']:.0f} ms "
            f"(up to {hold['max_jobs']} jobs at once)"
        )
    if r.phases:
        figures += ", phases s: " + " ".join(f"{k}={v:.1f}" for k, v in r.phases.items())
    run = (r.machine_cpu or {}).get("windows", {}).get("run")
    if run:
        figures += (
            f", CPU ms/job: machine {run['machine_ms']:.2f} = Snakemake {run['snakemake_ms']:.2f}"
            f" + Dask side {run['dask_ms']:.2f} (scheduler {run.get('dask.scheduler_ms', 0):.2f})"
            f" + jobs {run['jobs_ms']:.2f} + rest"
        )
    if r.leftovers:
        figures += f", LEFT {len(r.leftovers)} PROCESS(ES) RUNNING (ended by the harness)"
    if r.ran_twice or r.noticed_twice:
        figures += (
            f", {r.ran_twice} TASK(S) RAN TWICE, {r.noticed_twice} completion(s) reported "
            "twice by Dask"
        )
    return f"{r.run_id}: {r.status}; {figures}"


def write_outputs(runner: Runner, meta: dict[str, Any], plots: bool) -> None:
    results.save(runner.out, meta, runner.results, runner.samples)
    names = report.plot(runner.results, runner.samples, runner.out) if plots else []
    (runner.out / "results.md").write_text(report.markdown(meta, runner.results, names))


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _interrupt)  # stop the current run, then exit
    args = parse_args(argv)
    out: Path = args.out.resolve()
    if args.report_only:
        return report_only(out, plots=not args.no_plots)
    try:
        plan = make_plan(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    workroot = Path(tempfile.mkdtemp(prefix="dask-slurm-bench-"))
    runner = Runner(plan, out, workroot, args)
    started_cluster = prepare_cluster(runner, args)
    meta: dict[str, Any] = {
        "command": " ".join(map(shlex.quote, [Path(sys.executable).name, *sys.argv])),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "repeats": plan.repeats,
        "cores": plan.cores,
        "timeout_seconds": plan.timeout,
        "machine": results.machine_info(HERE.parent),
        "cluster": describe_cluster(runner),
    }
    try:
        for repeat, workload, contender in plan.runs():
            result = runner.run(repeat, workload, contender)
            runner.results.append(result)
            print(one_line(result), flush=True)
            results.save(out, meta, runner.results, runner.samples)
    finally:
        if started_cluster:
            problem = slurm.stop()
            print(f"stopped the SLURM test cluster{': ' + problem if problem else ''}")
        if not args.keep_workdirs:
            shutil.rmtree(workroot, ignore_errors=True)
    write_outputs(runner, meta, plots=not args.no_plots)
    print_tables(runner.results, out)
    return 0


def prepare_cluster(runner: Runner, args: argparse.Namespace) -> bool:
    """Find (or with --start-cluster, start) the test cluster if any contender needs it."""
    if not any(c.in_allocation for c in runner.plan.contenders):
        return False
    runner.cluster, runner.cluster_problem = slurm.find()
    started = False
    if runner.cluster is None and args.start_cluster:
        problem = slurm.start()
        started = not problem
        runner.cluster, runner.cluster_problem = slurm.find()
        if problem:
            runner.cluster_problem = f"SLURM test cluster could not be started: {problem}"
    if runner.cluster is None:
        print(f"skipped: {runner.cluster_problem}", flush=True)
    return started


def describe_cluster(runner: Runner) -> str:
    if runner.cluster is not None:
        cpus = "+".join(map(str, runner.cluster.node_cpus))
        return f"SLURM test cluster: {len(runner.cluster.node_cpus)} nodes, {cpus} CPUs"
    return runner.cluster_problem or "not used"


def report_only(out: Path, plots: bool) -> int:
    meta, found, samples = results.load(out)
    names = report.plot(found, samples, out) if plots else []
    (out / "results.md").write_text(report.markdown(meta, found, names))
    print_tables(found, out)
    return 0


def print_tables(found: list[RunResult], out: Path) -> None:
    rows = report.group(found)
    print("\n".join(["", *report.thin_table(rows), "", *report.farm_table(rows), ""]))
    print("\n".join([*report.cpu_lines(found), ""]))
    print(f"results: {out / results.RESULTS_FILE}, {out / 'results.md'}")


if __name__ == "__main__":
    sys.exit(main())
