"""The embedded default: a scheduler and worker processes on this machine.

Same lifecycle as the srun source (:class:`.cluster.ProcessCluster`), with the workers
started directly (each under the plugin's supervisor) instead of through srun. The
scheduler runs as its own process rather than inside Snakemake's, so its work never
competes with Snakemake's scheduling thread for the interpreter lock. It listens on
loopback unless --dask-slurm-scheduler-host or --dask-slurm-interface says otherwise.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..config import RunConfig
from ..errors import DaskSlurmError
from ..worker import SCHEDULER_PRELOAD_MODULE, TASK_MODULE
from ..worker.supervisor import sweep
from .base import ProcessCluster, dashboard_link, owner_environment
from .dask_argv import (
    SUPERVISOR_MODULE,
    SchedulerOptions,
    SupervisorOptions,
    WorkerOptions,
    dask_option_names,
    scheduler_command,
    supervised_worker_command,
)
from .preflight import check_dask_cli
from .process import ManagedProcess
from .security import scheduler_security_args, worker_security_args

SCHEDULER_PRELOAD = ("--preload", SCHEDULER_PRELOAD_MODULE)
WORKER_PRELOAD = ("--preload", TASK_MODULE)
#: Workers exit when they cannot reach the scheduler for this long.
DEATH_TIMEOUT = 60.0
#: How often a supervisor restarts a worker killed by a signal, with --dask-slurm-nanny.
RESTARTS = 3
PREFLIGHT_TIMEOUT = 60.0


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
    resources: Mapping[str, float],
) -> WorkerOptions:
    return WorkerOptions(
        scheduler_file=str(scheduler_file),
        nthreads=nthreads,
        resources=tuple(sorted(resources.items())),
        local_directory=config.local_directory,
        interface=config.interface,
        death_timeout=DEATH_TIMEOUT,
        extra_args=WORKER_PRELOAD + worker_security_args() + config.worker_args,
    )


def supervisor_options(config: RunConfig, name: str | None, indexed: bool) -> SupervisorOptions:
    return SupervisorOptions(
        record_dir=str(record_dir(config)),
        name=name,
        indexed=indexed,
        restarts=RESTARTS if config.nanny else 0,
    )


def record_dir(config: RunConfig) -> Path:
    """Where the workers' supervisors record that a dead worker's jobs are gone."""
    return config.run_dir / "workers"


def local_layout(cpus: int, workers: int | None) -> tuple[int, int]:
    """(worker processes, threads each) for ``cpus`` CPUs: one process by default."""
    nworkers = workers or 1
    if nworkers > cpus:
        raise DaskSlurmError(
            f"--dask-slurm-workers {nworkers} is more than the {cpus} CPUs of the local "
            "Dask cluster: every worker needs at least one CPU of its own. Choose at most "
            f"{cpus}, or give more CPUs with --dask-slurm-cpus."
        )
    return nworkers, max(1, cpus // nworkers)


def local_worker_names(nworkers: int) -> list[str]:
    return ["local"] if nworkers == 1 else [f"local-{i}" for i in range(nworkers)]


class LocalCluster(ProcessCluster):
    """Scheduler plus supervised ``dask worker`` processes on this machine."""

    def __init__(
        self,
        config: RunConfig,
        cpus: int,
        cpus_source: str,
        mem_mb: int | None,
        log_dir: Path,
        host: str = "127.0.0.1",
    ):
        scheduler_file = config.scheduler_file or log_dir / "scheduler.json"
        nworkers, nthreads = local_layout(cpus, config.workers)
        resources: dict[str, float] = {"cpus": nthreads}
        if mem_mb:
            resources["mem_mb"] = mem_mb // nworkers
        python = sys.executable
        scheduler = ManagedProcess(
            "Dask scheduler",
            scheduler_command(python, scheduler_options(config, scheduler_file, host)),
            log_dir / "scheduler.log",
            env=owner_environment(),
        )
        worker_env = owner_environment() | file_locking_env(config.file_locking)
        opts = worker_options(config, scheduler_file, nthreads, resources)
        workers = [
            ManagedProcess(
                f"local Dask worker {name}",
                supervised_worker_command(python, supervisor_options(config, name, False), opts),
                log_dir / f"worker-{name}.log",
                worker_env,
            )
            for name in local_worker_names(nworkers)
        ]
        super().__init__(
            scheduler,
            workers,
            scheduler_file,
            nworkers,
            config.startup_timeout,
            record_dir(config),
            config.nanny,
        )
        self.description = (
            f"local Dask cluster: {nworkers} worker process(es) x {nthreads} thread(s) on "
            f"this machine ({cpus} CPUs from {cpus_source}"
            + (f", {mem_mb} MB memory" if mem_mb else "")
            + ")"
        )
        self.log_dir = log_dir
        self.show_dashboard = config.dashboard
        self.python = python

    def preflight(self) -> None:
        """Check the Dask CLI accepts every option, before starting anything."""
        check_dask_cli(
            self.python,
            dask_option_names(self.scheduler.argv),
            (*dask_option_names(self.workers[0].argv), "--name"),
            PREFLIGHT_TIMEOUT,
            worker_module=SUPERVISOR_MODULE,
        )

    def sweep(self, worker: str, keys: Sequence[str]) -> str | None:
        """The workers run on this machine: end the jobs' processes from here."""
        return f"the plugin ended {sweep(keys)} process(es) of them on this machine"

    def summary(self) -> list[str]:
        lines = [f"Dask: {self.description}; logs in {self.log_dir}"]
        link = dashboard_link(self.client) if self.client and self.show_dashboard else None
        if link:
            lines.append(f"Dask dashboard: {link}")
        return lines
