"""What a Dask worker costs while its jobs run (issue 31): its CPU with N running `sleep`s.

    .venv/bin/python benchmarks/worker_idle.py [--jobs 64,1024] [--window 10] [--strace 3]
        [--dask-defaults] [--snakemake]

Starts a ``dask scheduler`` and one ``dask worker`` with the plugin's preload
(``worker.task``), the Dask settings the plugin gives its workers
(``clusters.spec.QUIET_WORKER_ENV``; ``--dask-defaults``: Dask's own) and as many threads
as the largest N, as local mode does; then for each N hands it N tasks of
``worker.task.run_and_report`` running ``sleep`` (the plugin's own Dask task, so the worker
waits for each job as it does in a run), waits until all N commands run, and prints the
worker process's CPU (user + system from ``/proc/<pid>/stat``: all its threads) over
``--window`` seconds; then, if ``strace`` is on the PATH, the system calls of every thread
of the worker over ``--strace`` seconds (``strace -f -c -p``; with a thousand threads,
strace itself slows the worker down). The same figure with no job running comes first:
what Dask itself costs. The jobs are then stopped with ``worker.task.kill_tasks``, as the
plugin stops them.

``--snakemake``: a real run instead, for each N: ``snakemake --executor dask-slurm
--dask-slurm-cpus N --jobs N`` on N rules of ``sleep`` (local mode: one worker), measured
the same way once all N jobs run, then stopped with SIGTERM as a user's Ctrl-C would.

Every figure is printed with the load average (the machine is shared). It exits 0
whatever the figures are.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bare_cluster import bare_cluster
from distributed import Client

from snakemake_executor_plugin_dask_slurm.worker import task
from snakemake_executor_plugin_dask_slurm.worker.wire import TaskSpec

try:
    from snakemake_executor_plugin_dask_slurm.clusters.spec import QUIET_WORKER_ENV
except ImportError:  # a checkout from before issue 31 (A/B runs with PYTHONPATH)
    QUIET_WORKER_ENV = ()

VENV_BIN = Path(sys.executable).parent
TICKS = os.sysconf("SC_CLK_TCK")
#: Long enough for the window and the strace: every job still runs when both are done.
SLEEP_SECONDS = 600


def cpu_seconds(pid: int) -> float:
    """User + system CPU of the process ``pid`` (every thread), from /proc/<pid>/stat."""
    data = Path(f"/proc/{pid}/stat").read_bytes()
    fields = data[data.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14, 15)


def children(pid: int) -> int:
    found = 0
    for task_dir in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            found += len((task_dir / "children").read_text().split())
    return found


def uptime() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()


def measure(pid: int, label: str, window: float, strace: float) -> None:
    before, began = cpu_seconds(pid), time.monotonic()
    time.sleep(window)
    used, took = cpu_seconds(pid) - before, time.monotonic() - began
    print(
        f"{label}: worker CPU {used:.2f} s in {took:.1f} s = {100 * used / took:.1f} % of a core"
        f" (load {uptime()})",
        flush=True,
    )
    tracer = shutil.which("strace")
    if strace <= 0 or tracer is None:
        return
    argv = [tracer, "-f", "-c", "-p", str(pid)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(strace)
    proc.send_signal(signal.SIGINT)
    _, said = proc.communicate(timeout=60)
    lines = [line for line in said.splitlines() if line.strip() and "---" not in line]
    lines = [line for line in lines if not line.startswith(tracer)]  # attached, detached
    print(f"{label}: strace -f -c over {strace:.0f} s (calls by syscall):")
    for line in lines[:12]:
        print(f"    {line}")
    if len(lines) > 12:
        print(f"    {lines[-1]}")


def spec(directory: str, jobs: int, i: int) -> TaskSpec:
    key = f"n{jobs}-sleep-{i}"  # a stopped key never starts again on its worker
    argv = ("sleep", str(SLEEP_SECONDS))
    return TaskSpec(key, argv, directory, (), f"{directory}/logs/{key}.log", None)


def wait_for(pid: int, jobs: int, timeout: float = 300) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if children(pid) >= jobs:
            return True
        time.sleep(0.5)
    return False


def run(client: Client, pid: int, jobs: int, args: argparse.Namespace, directory: str) -> None:
    specs = [spec(directory, jobs, i) for i in range(jobs)]
    futures = [client.submit(task.run_and_report, s, key=s.key, pure=False) for s in specs]
    if not wait_for(pid, jobs):
        print(f"{jobs} jobs: only {children(pid)} started within 300 s", flush=True)
    else:
        time.sleep(2)  # the last starts settle
        measure(pid, f"{jobs} sleeping jobs", args.window, args.strace)
    keys = [s.key for s in specs]
    client.run(task.kill_tasks, keys)
    client.gather(futures, errors="skip")
    del futures
    deadline = time.monotonic() + 60
    while children(pid) and time.monotonic() < deadline:
        time.sleep(0.2)


SNAKEFILE = """
rule all:
    input: expand("out/{{i}}.txt", i=range({jobs}))

rule one:
    output: "out/{{i}}.txt"
    shell: "sleep {seconds}; touch {{output}}"
"""


def the_worker(pid: int) -> int | None:
    """The Dask worker below the process ``pid`` (local mode starts one)."""
    import psutil

    with contextlib.suppress(psutil.Error):
        for child in psutil.Process(pid).children(recursive=True):
            if "distributed.cli.dask_worker" in " ".join(child.cmdline()):
                return int(child.pid)
    return None


def run_snakemake(jobs: int, args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as directory:
        Path(directory, "Snakefile").write_text(SNAKEFILE.format(jobs=jobs, seconds=SLEEP_SECONDS))
        argv = [str(VENV_BIN / "snakemake"), "--executor", "dask-slurm", "--jobs", str(jobs)]
        argv += ["--dask-slurm-cpus", str(jobs), "--quiet", "all"]
        log = open(Path(directory, "snakemake.log"), "wb")  # noqa: SIM115 (closed below)
        proc = subprocess.Popen(argv, cwd=directory, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 300
            worker = None
            while worker is None or children(worker) < jobs:
                if time.monotonic() > deadline or proc.poll() is not None:
                    print(f"snakemake, {jobs} jobs: they did not all start", flush=True)
                    return
                time.sleep(0.5)
                worker = worker or the_worker(proc.pid)
            time.sleep(2)
            measure(worker, f"snakemake, {jobs} sleeping jobs", args.window, args.strace)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", default="64,1024")
    parser.add_argument("--window", type=float, default=10.0)
    parser.add_argument("--strace", type=float, default=3.0)
    parser.add_argument("--dask-defaults", action="store_true")
    parser.add_argument("--snakemake", action="store_true")
    args = parser.parse_args()
    counts = [int(n) for n in args.jobs.split(",")]
    print(f"worker task module: {task.__file__}")
    if args.snakemake:
        for jobs in counts:
            run_snakemake(jobs, args)
        return
    env = dict(os.environ)
    if not args.dask_defaults:
        env.update(QUIET_WORKER_ENV)
    with bare_cluster(max(counts), env, settle=3.0) as cluster:  # its start-up done
        measure(cluster.worker_pid, "no job", args.window, args.strace)
        for jobs in counts:
            run(cluster.client, cluster.worker_pid, jobs, args, cluster.directory)


if __name__ == "__main__":
    main()
