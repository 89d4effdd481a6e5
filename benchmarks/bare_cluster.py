"""A bare Dask cluster for the benchmarks that drive the plugin's worker without Snakemake
(worker_idle.py, ceiling.py): a ``dask scheduler`` and one ``dask worker`` with the plugin's
task preload (``worker.task``), each in a process group of its own, stopped with their
groups (SIGTERM, then SIGKILL after 20 s) however the benchmark ends."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from distributed import Client

from snakemake_executor_plugin_dask_slurm.worker import task

VENV_BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class BareCluster:
    client: Client
    scheduler_pid: int
    worker_pid: int
    directory: str


@contextlib.contextmanager
def bare_cluster(
    threads: int, env: Mapping[str, str], worker_args: Sequence[str] = (), settle: float = 2.0
) -> Iterator[BareCluster]:
    """The cluster, its worker joined and ``settle`` seconds given to its start-up."""
    with tempfile.TemporaryDirectory() as directory:
        file = f"{directory}/scheduler.json"
        dask = str(VENV_BIN / "dask")
        null = subprocess.DEVNULL
        sched = subprocess.Popen(
            [dask, "scheduler", "--scheduler-file", file, "--port", "0", "--no-dashboard"],
            stdout=null, stderr=null, process_group=0,
        )  # fmt: skip
        worker_argv = [dask, "worker", "--scheduler-file", file, "--nworkers", "1"]
        worker_argv += ["--nthreads", str(threads), "--no-nanny", "--no-dashboard"]
        worker_argv += ["--preload", task.__name__, "--memory-limit", "0", *worker_args]
        worker = subprocess.Popen(
            worker_argv, env=dict(env), stdout=null, stderr=null, process_group=0
        )
        try:
            with Client(scheduler_file=file, timeout=60) as client:
                client.wait_for_workers(1, timeout=60)
                time.sleep(settle)
                yield BareCluster(client, sched.pid, worker.pid, directory)
        finally:
            for proc in (worker, sched):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=20)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
