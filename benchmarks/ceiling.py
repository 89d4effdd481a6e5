"""The plugin's own ceiling (issue 31): how many jobs a second its dispatcher and a worker
start and finish with no Snakemake in front of them.

    .venv/bin/python benchmarks/ceiling.py [--jobs 5000] [--threads 8] [--inflight 100,0]
        [--command /bin/true] [--chunk 64] [--batch 1]

Starts a ``dask scheduler`` and one ``dask worker`` with the plugin's preload
(``worker.task``), the Dask settings the plugin gives its workers
(``clusters.spec.QUIET_WORKER_ENV``), ``--threads`` threads and as many ``cpus``, as local
mode does (no TLS and no scheduler preload: what those add is not measured here). In this
process, the plugin's own :class:`Dispatcher` hands over ``--jobs`` tasks of
``worker.task.run_and_report`` (the plugin's Dask task: a job's own process, its output
pipe, ``os.wait4``, the outcome event), ``--chunk`` per ``submit_many`` as the executor
does, keeping at most ``--inflight`` unfinished (0: all at once), and drains what finished
from a thread woken by the dispatcher, as the executor's status loop is. Snakemake's side
(job selection, persistence, logging) is left out: this is the rate the plugin and Dask
could sustain if Snakemake's per-job work cost nothing.

Prints, for each ``--inflight``, the jobs per second from the first hand-over to the last
end, and the CPU per job of this process (the dispatcher and Dask's client), the scheduler
and the worker (user + system from /proc), with the load average. Exits 0 whatever the
figures are.

``--batch N`` (issue 46): the dispatcher's ``batch_limit``: up to N jobs of a chunk share one
Dask task (``dispatch/batching.py``; no more than the worker's ``--threads`` CPUs hold), as
``--dask-slurm-batch-size`` does in a run; 1: one job per task.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from bare_cluster import bare_cluster
from distributed import Client

from snakemake_executor_plugin_dask_slurm.clusters.spec import QUIET_WORKER_ENV
from snakemake_executor_plugin_dask_slurm.dispatch.dispatcher import Dispatcher
from snakemake_executor_plugin_dask_slurm.worker.wire import TaskSpec

VENV_BIN = Path(sys.executable).parent
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of the process ``pid`` (every thread), from /proc/<pid>/stat."""
    data = Path(f"/proc/{pid}/stat").read_bytes()
    fields = data[data.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def run(
    client: Client, pids: dict[str, int], args: argparse.Namespace, inflight: int, tag: str
) -> None:
    woken = threading.Event()
    dispatcher = Dispatcher(client, woken.set, batch_limit=args.batch)
    workdir = tempfile.mkdtemp(prefix="ceiling-")
    specs = [
        TaskSpec(
            f"{tag}-{i}",
            tuple(args.command.split()),
            workdir,
            (),
            f"{workdir}/{i}.log",
            None,
            batch="ceiling",
        )
        for i in range(args.jobs)
    ]
    done = 0
    handed = 0
    limit = inflight or args.jobs
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    failed = 0
    began = time.monotonic()
    while done < args.jobs:
        while handed < args.jobs and handed - done < limit:
            batch = specs[handed : min(handed + args.chunk, args.jobs, done + limit)]
            dispatcher.submit_many([(spec, {"cpus": 1.0}) for spec in batch])
            handed += len(batch)
        woken.wait(1.0)
        woken.clear()
        for finished in dispatcher.drain():
            done += 1
            failed += not finished.ok
    took = time.monotonic() - began
    used = {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}
    per_job = ", ".join(f"{name} {1000 * s / args.jobs:.3f}" for name, s in used.items())
    print(
        f"inflight {inflight or 'all'}, batch {args.batch}: {args.jobs} jobs in {took:.1f} s = "
        f"{args.jobs / took:.0f} jobs/s ({failed} failed); CPU ms per job: {per_job} "
        f"(load {load()})",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--inflight", default="100,0", help="comma-separated; 0: all at once")
    parser.add_argument("--command", default="/bin/true")
    parser.add_argument("--chunk", type=int, default=64)
    parser.add_argument("--batch", type=int, default=1, help="most jobs per Dask task")
    args = parser.parse_args()
    env = dict(os.environ, **dict(QUIET_WORKER_ENV))
    resources = ["--resources", f"cpus={args.threads}"]
    with bare_cluster(args.threads, env, resources) as cluster:
        pids = {"this process": os.getpid(), "scheduler": cluster.scheduler_pid}
        pids["worker"] = cluster.worker_pid
        for n, inflight in enumerate(int(x) for x in args.inflight.split(",")):
            run(cluster.client, pids, args, inflight, f"r{n}")


if __name__ == "__main__":
    main()
