"""The embedded default: a scheduler and worker processes on this machine.

Same lifecycle as the srun source (:class:`.cluster.ProcessCluster`), with the workers
started directly instead of through srun. The scheduler runs as its own process rather
than inside Snakemake's, so its work never competes with Snakemake's scheduling thread
for the interpreter lock. It listens on loopback only.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from .cluster import ProcessCluster, dashboard_link, owner_environment
from .commands import SchedulerOptions, WorkerOptions, scheduler_command, worker_command
from .processes import ManagedProcess
from .security import scheduler_security_args, worker_security_args
from .validation import RunConfig

SCHEDULER_PRELOAD = ("--preload", "snakemake_executor_plugin_dask_slurm.scheduler_preload")
WORKER_PRELOAD = ("--preload", "snakemake_executor_plugin_dask_slurm.worker_task")
#: Workers exit when they cannot reach the scheduler for this long.
DEATH_TIMEOUT = 60.0


def file_locking_env(setting: str) -> dict[str, str]:
    """Environment that applies --dask-slurm-file-locking (nothing for dask-default)."""
    if setting == "dask-default":
        return {}
    value = "True" if setting == "on" else "False"
    return {"DASK_DISTRIBUTED__WORKER__USE_FILE_LOCKING": value}


def dashboard_address(config: RunConfig, host: str | None) -> str | None:
    """A free port; on loopback when the scheduler is (local mode), else all interfaces
    so that an SSH tunnel through the login node reaches it."""
    if not config.dashboard:
        return None
    return "127.0.0.1:0" if host == "127.0.0.1" else ":0"


def scheduler_options(
    config: RunConfig, scheduler_file: Path, host: str | None
) -> SchedulerOptions:
    return SchedulerOptions(
        scheduler_file=str(scheduler_file),
        host=host,
        interface=None if host else config.interface,
        dashboard_address=dashboard_address(config, host),
        extra_args=SCHEDULER_PRELOAD + scheduler_security_args(),
    )


def worker_options(
    config: RunConfig,
    scheduler_file: Path,
    nthreads: int,
    nworkers: int,
    resources: Mapping[str, float],
    name: str | None,
) -> WorkerOptions:
    return WorkerOptions(
        scheduler_file=str(scheduler_file),
        nthreads=nthreads,
        nworkers=nworkers,
        resources=tuple(sorted(resources.items())),
        name=name,
        local_directory=config.local_directory,
        interface=config.interface,
        nanny=config.nanny or nworkers > 1,
        death_timeout=DEATH_TIMEOUT,
        extra_args=WORKER_PRELOAD + worker_security_args() + config.worker_args,
    )


def local_layout(cpus: int, workers: int | None) -> tuple[int, int]:
    """(worker processes, threads each) for ``cpus`` CPUs: one process by default."""
    nworkers = min(workers or 1, cpus)
    return nworkers, max(1, cpus // nworkers)


class LocalCluster(ProcessCluster):
    """Scheduler plus ``dask worker`` processes on this machine."""

    def __init__(
        self,
        config: RunConfig,
        cpus: int,
        cpus_source: str,
        mem_mb: int | None,
        log_dir: Path,
    ):
        scheduler_file = config.scheduler_file or log_dir / "scheduler.json"
        nworkers, nthreads = local_layout(cpus, config.workers)
        resources: dict[str, float] = {"cpus": nthreads}
        if mem_mb:
            resources["mem_mb"] = mem_mb // nworkers
        python = sys.executable
        scheduler = ManagedProcess(
            "Dask scheduler",
            scheduler_command(python, scheduler_options(config, scheduler_file, "127.0.0.1")),
            log_dir / "scheduler.log",
            env=owner_environment(),
        )
        worker_env = owner_environment() | file_locking_env(config.file_locking)
        argv = worker_command(
            python,
            worker_options(config, scheduler_file, nthreads, nworkers, resources, "local"),
        )
        worker = ManagedProcess("local Dask worker", argv, log_dir / "worker-local.log", worker_env)
        super().__init__(scheduler, [worker], scheduler_file, nworkers, config.startup_timeout)
        self.description = (
            f"local Dask cluster: {nworkers} worker process(es) x {nthreads} thread(s) on "
            f"this machine ({cpus} CPUs from {cpus_source}"
            + (f", {mem_mb} MB memory" if mem_mb else "")
            + ")"
        )
        self.log_dir = log_dir
        self.show_dashboard = config.dashboard
        self.watch_worker_count = not (config.nanny or nworkers > 1)  # no nanny restarts

    def summary(self) -> list[str]:
        lines = [f"Dask: {self.description}; logs in {self.log_dir}"]
        link = dashboard_link(self.client) if self.client and self.show_dashboard else None
        if link:
            lines.append(f"Dask dashboard: {link}")
        return lines
