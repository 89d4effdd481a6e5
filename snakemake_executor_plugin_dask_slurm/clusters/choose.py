"""Pick and build the cluster source for this run (local, attach, srun or sbatch), and
its worker jobs when the farm may grow."""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..config import GrowthConfig, RunConfig
from ..errors import DaskSlurmError
from ..slurm.allocation import cpus_for_this_node, granted_memory, in_allocation
from ..slurm.argv import partition_limits_command
from ..slurm.run import ask, optional_command
from ..slurm.walltime import parse_duration, partition_time_limit, time_option
from ..worker.clock import Runway, plan_runway
from .attach import AttachCluster
from .base import ClusterSource
from .local import LocalProcessCluster
from .network import check_bindable, choose_scheduler_host
from .security import AttachSecurity, PlainTcp, RunCredentials, RunSecurity
from .spec import local_layout
from .worker_jobs.growing import GrowingCluster
from .worker_jobs.pool import WorkerJobs

if TYPE_CHECKING:
    from .early import EarlyWorkers


def local_cpus(config: RunConfig, cores: int | None = None) -> tuple[int, str]:
    """CPUs for the local cluster and where the number came from: Snakemake's ``--cores``
    is the local executor's CPU budget, so it is this one's too unless
    --dask-slurm-cpus says otherwise."""
    if config.cpus:
        return config.cpus, "--dask-slurm-cpus"
    if cores:
        return cores, "Snakemake's --cores"
    import dask.system

    return cpus_for_this_node(os.environ, dask.system.CPU_COUNT, os.cpu_count() or 1)


def local_worker_cpus(config: RunConfig) -> int:
    """CPUs of one local worker (the most threads a job gets in local mode)."""
    return local_layout(local_cpus(config)[0], config.workers)[1]


def local_mem_mb(cpus: int) -> tuple[int, str]:
    """Memory the local workers advertise: SLURM's grant on this node (for ``cpus`` CPUs),
    else what this process may use."""
    granted, source = granted_memory(os.environ, (cpus,))
    if granted:
        return granted[0], source
    from distributed.system import MEMORY_LIMIT

    return MEMORY_LIMIT // 10**6, "memory this process may use (cgroup/machine)"


def run_security(config: RunConfig, seconds_left: float | None) -> RunSecurity:
    """This run's own TLS credentials, valid for ``seconds_left`` (None: not known), or
    plain TCP with --dask-slurm-insecure. Nothing is written until the cluster starts."""
    if config.insecure:
        return PlainTcp()
    lifetime = datetime.timedelta(seconds=seconds_left) if seconds_left is not None else None
    return RunCredentials.for_run(config.run_dir, lifetime)


def attach_security(config: RunConfig) -> AttachSecurity:
    """The TLS files the settings name (each checked now), else the Dask configuration's."""
    names = ("--dask-slurm-tls-ca-file", "--dask-slurm-tls-cert", "--dask-slurm-tls-key")
    for name, path in zip(names, config.tls_files, strict=True):
        if path and not os.access(path, os.R_OK):
            raise DaskSlurmError(
                f"{name} {path}: the file does not exist or cannot be read. Name the PEM "
                "file the scheduler's administrator gave you."
            )
    return AttachSecurity(*config.tls_files)


def make_source(
    config: RunConfig,
    logger: Any,
    cores: int | None,
    name: str,
    early: EarlyWorkers | None = None,
) -> ClusterSource:
    """The cluster this run uses, planned, not started; with its worker jobs (named
    ``name`` in SLURM's queue, checked with SLURM) when the farm may grow. Its commands are
    checked by its :meth:`~.base.ClusterSource.preflight`, which the run calls once the
    processes are launched (executor/run.py's ``launch``). ``early``: local workers
    started before the plan (:mod:`.early`), which the local cluster's launch adopts."""
    limit = worker_job_limit(config.growth) if config.growth is not None else None
    source = _make_source(config, logger, cores, limit, early)
    if config.growth is None:
        return source
    runway = source.clock.runway() if source.clock is not None else None
    if config.cluster == "sbatch":  # no allocation of its own: worker jobs only
        runway = plan_runway(limit, None, False, config.landing_margin, config.runtime_margin)
    pool = make_worker_jobs(
        config,
        source,
        name,
        lambda line: logger.info(f"dask-slurm: {line}"),
        lambda line: logger.warning(f"dask-slurm: {line}"),
        runway,
    )
    logger.info(
        f"dask-slurm: the farm grows with up to {pool.config.max_jobs} worker job(s) while "
        f"jobs wait ({pool.provider.options_text()}); checked with sbatch --test-only"
    )
    logger.info(f"dask-slurm: {clock_line_of(runway, limit, config.landing_margin)}")
    return GrowingCluster(source, pool)


def worker_job_limit(growth: GrowthConfig) -> float | None:
    """The worker jobs' time limit, seconds: --time among --dask-slurm-sbatch-args (they
    come last, so they win), else --dask-slurm-worker-job-time, else what the partition
    gives a job that asks for none (its default time, else its maximum; one sinfo). None:
    no limit, or none SLURM could tell."""
    given = time_option(growth.sbatch_args) or growth.time_limit
    if given is not None:
        return parse_duration(given)
    sinfo = optional_command("sinfo")
    done = ask(partition_limits_command(growth.partition, sinfo), 30.0) if sinfo else None
    if done is None or done.returncode != 0:
        return None
    return partition_time_limit(done.stdout, growth.partition)


def clock_line_of(runway: Runway | None, limit: float | None, landing: float) -> str:
    """The start-up line about the worker jobs' clocks."""
    if runway is not None:
        fresh = (
            f"; a job needing more than about {runway.fresh:.0f} s (with the runtime "
            "margin) is refused"
            if runway.fresh is not None
            else ""
        )
        return (
            f"worker jobs have {limit or 0:.0f} s each: each lands {runway.margin:.0f} s "
            f"before its end (no job starts there that cannot finish by then, those that "
            f"cannot are stopped and run again elsewhere) and is replaced in time while work "
            f"remains; jobs go only to workers with time left for them (a grid of "
            f"{runway.step} s){fresh}"
        )
    if limit is None:
        return "worker jobs have no time limit SLURM could tell: they do not land"
    if landing <= 0:
        return "--dask-slurm-landing-margin 0: worker jobs do not land before their limit"
    return (
        "worker jobs land before their time limit and are replaced in time, but jobs are "
        "not placed by their workers' time left (the run's own workers have no time limit)"
    )


def _make_source(
    config: RunConfig,
    logger: Any,
    cores: int | None,
    worker_job_limit: float | None = None,
    early: EarlyWorkers | None = None,
) -> ClusterSource:
    if config.cluster == "attach":
        return AttachCluster(
            config.scheduler_address,
            config.scheduler_file,
            config.startup_timeout,
            attach_security(config),
        )
    if config.cluster == "srun":
        from .srun import SrunCluster

        return SrunCluster.from_environment(
            config, lambda left: run_security(config, left), worker_job_limit
        )
    if config.cluster == "sbatch":
        from .sbatch import SbatchCluster

        return SbatchCluster.from_environment(config, lambda left: run_security(config, left))
    cpus, cpus_source = local_cpus(config, cores)
    mem_mb, _ = local_mem_mb(cpus)
    if in_allocation(os.environ):
        logger.info(
            "dask-slurm: running on a local Dask cluster inside SLURM allocation "
            f"{os.environ.get('SLURM_JOB_ID')}: only this machine's granted CPUs are used"
        )
    host, _ = choose_scheduler_host(config.interface, config.scheduler_host, None, False)
    check_bindable(host)
    security = early.security if early is not None else run_security(config, None)
    return LocalProcessCluster.plan(
        config, cpus, cpus_source, mem_mb, host or "127.0.0.1", security, early
    )


def make_worker_jobs(
    config: RunConfig,
    source: ClusterSource,
    name: str,
    say: Callable[[str], None],
    warn: Callable[[str], None],
    runway: Runway | None = None,
) -> WorkerJobs:
    """The run's worker jobs, checked with SLURM (``sbatch --test-only``); their workers
    land and advertise ``runway`` when the run has one."""
    assert config.growth is not None
    import dataclasses
    import sys

    from .preflight import check_plan
    from .spec import Paths, sample_worker_argv, worker_recipe
    from .worker_jobs.landing import Lander
    from .worker_jobs.provider import GrowthCommands, SlurmProvider

    recipe = dataclasses.replace(
        worker_recipe(config, Paths.of(config), sys.executable, os.getpid(), source.security),
        job_prefix=True,
        landing_margin=runway.margin if runway is not None else 0.0,
        runway_step=runway.step if runway is not None else None,
        runway_lookback=runway.limit if runway is not None else 0.0,
    )
    check_plan(None, [sample_worker_argv(recipe)], config.worker_args)
    provider = SlurmProvider(config.growth, recipe, config.run_dir, name, GrowthCommands.find())
    provider.prepare()
    return WorkerJobs(Lander(provider, say, warn, runway, landing_margin=config.landing_margin))
