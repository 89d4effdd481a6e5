"""N thin rules once end to end, local mode, watched from outside (issue 46, item 5).

    .venv/bin/python benchmarks/million.py --rules 1000000 --workdir /work/million-run \
        [--jobs 100] [--deadline 23:10] [--min-available-gb 3] [--out benchmarks/results/million]

Runs plain ``snakemake --executor dask-slurm --dask-slurm-cluster local --jobs 100`` (no
timing hook: the plugin's ``DASK_SLURM_TIMING_EVENTS`` keeps every event in Snakemake's
process, which at a million jobs would be part of the memory measured) on
``benchmarks/workloads.py``'s thin workflow, ``echo {i} > out/{i}.txt`` for i < N, and
records from outside, every ``SAMPLE_SECONDS``:

* every process of the run by role (Snakemake, the Dask scheduler, each worker, each
  supervisor, the warm zygote): RSS, the kernel's ``VmHWM`` (read again at every sample, so
  the last one read is the peak just before the process ended) and CPU time;
* MemAvailable and the load average (the load also printed once a minute);
* Snakemake's log, followed as it grows, each line stamped when read: the DAG's start and
  end (``Building DAG of jobs...``, ``Job stats:``), each job handed over (``rule thin:``),
  each job done (``k of M steps``), the end (``Complete log``).

A watchdog stops the run (SIGINT to Snakemake; SIGKILL of everything it started
``STOP_GRACE`` seconds later) when MemAvailable drops under ``--min-available-gb`` or at
``--deadline`` (UTC, HH:MM) or when a file ``STOP`` appears in the workdir, and the
figures so far are still written. Afterwards every
output is counted and read back. It prints the figures and writes ``samples.tsv``,
``progress.tsv`` and ``summary.json`` to ``--out``; the Snakemake log stays in the workdir.
A benchmark, not a test: it exits 0 whatever the figures are.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from measure import read_vmhwm_kb  # noqa: E402
from slurm import clean_environment  # noqa: E402
from workloads import Workload  # noqa: E402

SAMPLE_SECONDS = 1.0
LOG_SECONDS = 0.5
LOAD_EVERY = 60.0
STOP_GRACE = 120.0
WINDOW_JOBS = 10_000
#: Processes seen for less than this (seconds) are summed up, not listed: a job's own
#: process forked from a worker carries the worker's command line for its first moments.
LONG_LIVED = 10.0
ROLES = (
    ("scheduler", "distributed.cli.dask_scheduler"),
    ("worker", "distributed.cli.dask_worker"),
    ("supervisor", "worker.supervisor"),
    ("zygote", "warm.zygote"),
)
DONE = re.compile(r"^(\d+) of (\d+) steps")
MARKS = {
    "dag_start": "Building DAG of jobs",
    "dag_done": "Job stats:",
    "complete": "Complete log",
}


def role_of(cmdline: str) -> str:
    for role, marker in ROLES:
        if marker in cmdline:
            return role
    return "other"


@dataclass
class Proc:
    role: str
    pid: int
    rss_peak_mb: float = 0.0
    hwm_mb: float = 0.0
    cpu_s: float = 0.0
    first: float = 0.0
    last: float = 0.0


@dataclass
class Record:
    """What the watchers saw; times are seconds since the start (``time.monotonic``)."""

    started: float
    marks: dict[str, float] = field(default_factory=dict)
    handed: int = 0
    first_handed: float | None = None
    last_handed: float | None = None
    done: int = 0
    total_steps: int | None = None
    rounds: int = 0  # Snakemake's scheduling rounds ("Select jobs to execute...")
    #: (seconds, jobs done, rounds so far): one row each time the count of jobs done moves
    progress: list[tuple[float, int, int]] = field(default_factory=list)
    #: (seconds, Snakemake's CPU seconds), one row per sample
    snakemake_cpu: list[tuple[float, float]] = field(default_factory=list)
    procs: dict[int, Proc] = field(default_factory=dict)
    loads: list[tuple[float, str]] = field(default_factory=list)
    min_available_gb: float = float("inf")
    stopped: str | None = None

    def now(self) -> float:
        return time.monotonic() - self.started


class LogFollower:
    """Reads Snakemake's log as it grows and stamps what matters."""

    def __init__(self, path: Path, record: Record):
        self.path, self.record, self.rest = path, record, b""
        self.offset = 0

    def read(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return
        self.offset += len(chunk)
        lines = (self.rest + chunk).split(b"\n")
        self.rest = lines.pop()
        t = self.record.now()
        for raw in lines:
            self.line(raw.decode("utf-8", "replace").strip(), t)

    def line(self, text: str, t: float) -> None:
        rec = self.record
        if text.startswith("rule thin:"):
            rec.handed += 1
            rec.last_handed = t
            if rec.first_handed is None:
                rec.first_handed = t
            return
        m = DONE.match(text)
        if m:
            rec.done, rec.total_steps = int(m.group(1)), int(m.group(2))
            rec.progress.append((t, rec.done, rec.rounds))
            return
        if text.startswith("Select jobs to execute"):
            rec.rounds += 1
            return
        for mark, prefix in MARKS.items():
            if mark not in rec.marks and text.startswith(prefix):
                rec.marks[mark] = t


class Sampler:
    """Every process below the root, by role: RSS, VmHWM, CPU; and the machine's memory."""

    def __init__(self, root: int, record: Record, out: Path):
        self.root, self.record = root, record
        self.samples = open(out / "samples.tsv", "w")  # noqa: SIM115 (closed in close())
        self.samples.write("t\trole\tpid\trss_mb\thwm_mb\tcpu_s\tmem_available_gb\n")

    def sample(self) -> float:
        t = self.record.now()
        available = mem_available_gb()
        self.record.min_available_gb = min(self.record.min_available_gb, available)
        try:
            tree = [psutil.Process(self.root), *psutil.Process(self.root).children(True)]
        except psutil.Error:
            tree = []
        for p in tree:
            with contextlib.suppress(psutil.Error):
                cmd = " ".join(p.cmdline())
                role = "snakemake" if p.pid == self.root else role_of(cmd)
                if role == "other":
                    continue  # the jobs' own short-lived shells
                self.one(p, role, t, available)
        self.samples.flush()
        return available

    def one(self, p: psutil.Process, role: str, t: float, available: float) -> None:
        info = self.record.procs.setdefault(p.pid, Proc(role, p.pid, first=t))
        rss = p.memory_info().rss / 2**20
        hwm = (read_vmhwm_kb(p.pid) or 0) / 1024
        times = p.cpu_times()
        info.rss_peak_mb = max(info.rss_peak_mb, rss)
        info.hwm_mb = max(info.hwm_mb, hwm)
        info.cpu_s = times.user + times.system
        info.last = t
        if role == "snakemake":
            self.record.snakemake_cpu.append((t, info.cpu_s))
        self.samples.write(
            f"{t:.1f}\t{role}\t{p.pid}\t{rss:.1f}\t{hwm:.1f}\t{info.cpu_s:.2f}\t{available:.2f}\n"
        )

    def close(self) -> None:
        self.samples.close()


def mem_available_gb() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    return float("inf")


def load() -> str:
    return Path("/proc/loadavg").read_text().strip()


def utc_deadline(hhmm: str) -> float:
    """Seconds from now until the next HH:MM UTC."""
    now = datetime.datetime.now(datetime.UTC)
    h, m = map(int, hhmm.split(":"))
    at = now.replace(hour=h, minute=m, second=0, microsecond=0)
    if at <= now:
        at += datetime.timedelta(days=1)
    return (at - now).total_seconds()


def stop(proc: subprocess.Popen[bytes], why: str, record: Record) -> None:
    """SIGINT to Snakemake; then SIGKILL of its process group and everything below it."""
    record.stopped = f"{why} at {record.now():.0f} s"
    print(f"stopping the run: {record.stopped}", flush=True)
    below = []
    with contextlib.suppress(psutil.Error):
        below = psutil.Process(proc.pid).children(recursive=True)
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGINT)
    try:
        proc.wait(STOP_GRACE)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        for p in below:
            with contextlib.suppress(psutil.Error):
                p.kill()
        proc.wait()


def watch(
    proc: subprocess.Popen[bytes], args: argparse.Namespace, record: Record, out: Path
) -> None:
    follower = LogFollower(args.workdir / "snakemake.log", record)
    sampler = Sampler(proc.pid, record, out)
    deadline = record.now() + utc_deadline(args.deadline)
    next_sample = next_load = 0.0
    while proc.poll() is None:
        follower.read()
        t = record.now()
        if t >= next_sample:
            next_sample = t + SAMPLE_SECONDS
            available = sampler.sample()
            if available < args.min_available_gb:
                stop(proc, f"MemAvailable {available:.2f} GB < {args.min_available_gb} GB", record)
            elif t >= deadline:
                stop(proc, f"deadline {args.deadline} UTC", record)
            elif (args.workdir / "STOP").exists():
                stop(proc, "asked to (a STOP file in the workdir)", record)
        if t >= next_load:
            next_load = t + LOAD_EVERY
            record.loads.append((t, load()))
            print(
                f"{t:7.0f} s  load {record.loads[-1][1]}  handed {record.handed}  "
                f"done {record.done}  MemAvailable {mem_available_gb():.1f} GB",
                flush=True,
            )
        time.sleep(LOG_SECONDS)
    record.marks["exit"] = record.now()
    follower.read()
    sampler.close()


def verify(workdir: Path, n: int) -> dict[str, Any]:
    """Count the outputs and read every one back."""
    began = time.monotonic()
    out = workdir / "out"
    names = set(os.listdir(out)) if out.is_dir() else set()
    expected = {f"{i}.txt" for i in range(n)}
    correct = 0
    for i in range(n):
        with contextlib.suppress(OSError):
            if (out / f"{i}.txt").read_text() == f"{i}\n":
                correct += 1
    return {
        "files": len(names),
        "missing": len(expected - names),
        "extra": len(names - expected),
        "correct": correct,
        "seconds": round(time.monotonic() - began, 1),
    }


def cpu_at(cpu: list[tuple[float, float]], t: float) -> float | None:
    """Snakemake's CPU seconds at the last sample before ``t``."""
    before = [c for s, c in cpu if s <= t]
    return before[-1] if before else None


def windows(record: Record, every: int) -> list[dict[str, Any]]:
    """Per ``every`` jobs done: jobs/s, Snakemake's rounds and its CPU ms per job."""
    rows: list[dict[str, Any]] = []
    mark = every
    prev: tuple[float, int, int] | None = None
    for t, n, rounds in record.progress:
        if prev is None:
            prev = (t, n, rounds)
            continue
        while n >= mark:
            jobs = mark - prev[1]
            c0, c1 = cpu_at(record.snakemake_cpu, prev[0]), cpu_at(record.snakemake_cpu, t)
            rows.append(
                {
                    "to": mark,
                    "t": round(t, 1),
                    "rate": round(jobs / max(t - prev[0], 1e-3), 1),
                    "jobs_per_round": round(jobs / max(rounds - prev[2], 1), 1),
                    "snakemake_cpu_ms_per_job": round(1000 * (c1 - c0) / jobs, 2)
                    if c0 is not None and c1 is not None and jobs
                    else None,
                }
            )
            prev, mark = (t, mark, rounds), mark + every
    return rows


def rate_between(progress: list[tuple[float, int, int]], lo: int, hi: int) -> float | None:
    """Jobs/s from the ``lo``-th job done to the ``hi``-th (the steady state)."""
    t_lo = next((t for t, n, _ in progress if n >= lo), None)
    t_hi = next((t for t, n, _ in progress if n >= hi), None)
    if t_lo is None or t_hi is None or t_hi <= t_lo:
        return None
    return (hi - lo) / (t_hi - t_lo)


def phases(record: Record, n: int) -> dict[str, Any]:
    m = record.marks
    thin_done = next((t for t, d, _ in record.progress if d >= n), None)
    last_done = record.progress[-1][0] if record.progress else None
    exit_t = m.get("exit")
    steady = rate_between(record.progress, n // 4, 3 * n // 4)  # None: not reached

    def span(a: float | None, b: float | None) -> float | None:
        return round(b - a, 1) if a is not None and b is not None else None

    return {
        "start_to_dag_start": span(0.0, m.get("dag_start")),
        "dag (Building DAG → Job stats)": span(m.get("dag_start"), m.get("dag_done")),
        "start_to_dag_done": span(0.0, m.get("dag_done")),
        "dag_done_to_first_handed": span(m.get("dag_done"), record.first_handed),
        "first_handed_to_last_handed": span(record.first_handed, record.last_handed),
        "steady_rate_25_75 (jobs/s)": None if steady is None else round(steady, 1),
        "tail: last_handed_to_all_thin_done": span(record.last_handed, thin_done),
        "thin_done_to_last_step": span(thin_done, last_done),
        "last_step_to_complete_log": span(last_done, m.get("complete")),
        "complete_log_to_exit": span(m.get("complete"), exit_t),
        "last_step_to_exit": span(last_done, exit_t),
        "wall": round(exit_t, 1) if exit_t is not None else None,
    }


def summarize(
    record: Record, n: int, proc: subprocess.Popen[bytes], check: dict[str, Any]
) -> dict[str, Any]:
    ordered = sorted(record.procs.values(), key=lambda p: (p.role, p.first))
    procs = [p for p in ordered if p.last - p.first >= LONG_LIVED]
    brief = [p for p in ordered if p.last - p.first < LONG_LIVED]
    return {
        "rules": n,
        "returncode": proc.returncode,
        "stopped": record.stopped,
        "handed": record.handed,
        "done_steps": record.done,
        "total_steps": record.total_steps,
        "phases": phases(record, n),
        "rounds": record.rounds,
        "windows": windows(record, max(1, min(WINDOW_JOBS, n // 10))),
        "processes": [
            {
                "role": p.role,
                "pid": p.pid,
                "rss_peak_sampled_mb": round(p.rss_peak_mb, 1),
                "vmhwm_last_read_mb": round(p.hwm_mb, 1),
                "cpu_s": round(p.cpu_s, 1),
                "seen_s": [round(p.first, 1), round(p.last, 1)],
            }
            for p in procs
        ],
        "short_lived": {
            "count": len(brief),
            "roles": sorted({p.role for p in brief}),
            "rss_peak_max_mb": round(max((p.rss_peak_mb for p in brief), default=0.0), 1),
        },
        "min_mem_available_gb": round(record.min_available_gb, 2),
        "loads": record.loads,
        "outputs": check,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", type=int, default=1_000_000)
    parser.add_argument("--jobs", default="100")
    parser.add_argument("--workdir", type=Path, default=Path("/work/million-run"))
    parser.add_argument("--out", type=Path, default=HERE / "results" / "million")
    parser.add_argument("--deadline", default="23:10", help="UTC HH:MM: stop the run then")
    parser.add_argument("--min-available-gb", type=float, default=3.0)
    parser.add_argument("--keep", action="store_true", help="keep the workdir's outputs")
    args = parser.parse_args()
    shutil.rmtree(args.workdir, ignore_errors=True)
    Workload("thin", args.rules).write(args.workdir)
    out = args.out / f"thin-{args.rules}"
    out.mkdir(parents=True, exist_ok=True)
    snakemake = str(HERE.parent / ".venv" / "bin" / "snakemake")
    argv = [
        snakemake, "--executor", "dask-slurm", "--dask-slurm-cluster", "local",
        "--jobs", args.jobs,
    ]  # fmt: skip
    disk0 = shutil.disk_usage(args.workdir)
    print(f"command: {' '.join(argv)}  (in {args.workdir})", flush=True)
    print(f"start {datetime.datetime.now(datetime.UTC):%H:%M:%S} UTC, load {load()}, "
          f"disk free {disk0.free / 1e9:.1f} GB", flush=True)  # fmt: skip
    record = Record(time.monotonic())
    with open(args.workdir / "snakemake.log", "wb") as log:
        proc = subprocess.Popen(
            argv, cwd=args.workdir, env=clean_environment(os.environ), stdin=subprocess.DEVNULL,
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        watch(proc, args, record, out)
    except BaseException:
        stop(proc, "interrupted", record)
        raise
    disk1 = shutil.disk_usage(args.workdir)
    end_load = load()
    check = verify(args.workdir, args.rules)
    summary = summarize(record, args.rules, proc, check)
    summary |= {
        "argv": argv,
        "load_start": record.loads[0][1] if record.loads else None,
        "load_end": end_load,
        "disk_used_gb": round((disk0.free - disk1.free) / 1e9, 2),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    (out / "progress.tsv").write_text(
        "".join(f"{t:.1f}\t{n}\t{r}\n" for t, n, r in record.progress)
    )
    print(json.dumps({k: v for k, v in summary.items() if k != "windows"}, indent=1))
    print("jobs/s per window of completed jobs:")
    for row in summary["windows"]:
        print(
            f"  to {row['to']:>8}  at {row['t']:8.1f} s  {row['rate']:7.1f} jobs/s  "
            f"{row['jobs_per_round']:6.1f} jobs/round  "
            f"Snakemake {row['snakemake_cpu_ms_per_job']} ms CPU/job"
        )
    if not args.keep:
        shutil.rmtree(args.workdir / "out", ignore_errors=True)
        shutil.rmtree(args.workdir / ".snakemake", ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
