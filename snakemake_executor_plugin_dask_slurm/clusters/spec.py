"""Plan the Dask cluster of a run: every process to start, as data (pure).

The way distributed's ``SubprocessCluster`` builds a spec that ``SpecCluster`` runs: the
functions here turn the resolved settings and what SLURM granted (or this machine has)
into a frozen :class:`ClusterSpec` — each process's argument list, log file and the
environment it adds, how many workers to wait for — and :class:`.process_cluster.ProcessCluster`
only starts, watches and stops what the spec says. Nothing here reads the environment,
starts a process or touches the network; ``tests/unit/golden/`` pins a whole plan. How any
allocation's workers are started (the run's own, a worker job's) is the workers' recipe,
:mod:`.recipe`, from which :func:`plan_worker_steps` plans the srun steps.
"""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass
from pathlib import Path

from ..config import RunConfig
from ..errors import DaskSlurmError
from ..slurm.allocation import Allocation
from ..slurm.argv import srun_step_command
from ..slurm.layout import NodeGroup, WorkerLayout
from ..worker import SCHEDULER_PRELOAD_MODULE, TASK_MODULE
from ..worker.clock import advertised
from ..worker.scheduler_preload import DASHBOARD_VARIABLE
from .dask_argv import (
    SchedulerOptions,
    WorkerOptions,
    scheduler_command,
    supervised_worker_command,
)
from .recipe import LandingPoint, WorkerRecipe
from .security import RunSecurity

#: How often a supervisor restarts a worker killed by a signal, with --dask-slurm-nanny.
RESTARTS = 3
#: srun job-step name of the worker steps, as ``squeue -s`` shows it.
STEP_NAME = "dask-workers"
#: The environment variable that tells the scheduler who owns it (see scheduler_preload).
OWNER_VARIABLE = "DASK_SLURM_OWNER_PID"


@dataclass(frozen=True)
class ProcessSpec:
    """One process to start: what it is called, how, where its output goes, and what it
    adds to the plugin's own environment."""

    name: str
    argv: tuple[str, ...]
    log_path: Path
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ClusterSpec:
    scheduler: ProcessSpec
    #: Local mode: one per worker; srun mode: one srun step per node size.
    workers: tuple[ProcessSpec, ...]
    scheduler_file: Path
    expected_workers: int
    #: Where the workers' supervisors record that a dead worker's jobs are gone.
    record_dir: Path
    restarts_workers: bool
    description: str
    #: --dask-slurm-worker-args and --dask-slurm-srun-args: a bad option is blamed on its
    #: setting (the preflight, a worker step that does not start).
    user_worker_args: tuple[str, ...] = ()
    user_srun_args: tuple[str, ...] = ()

    @property
    def user_settings(self) -> dict[str, tuple[str, ...]]:
        return {
            name: args
            for name, args in (
                ("--dask-slurm-worker-args", self.user_worker_args),
                ("--dask-slurm-srun-args", self.user_srun_args),
            )
            if args
        }


@dataclass(frozen=True)
class Paths:
    """Where this run's files go."""

    run_dir: Path
    scheduler_file: Path

    @property
    def logs(self) -> Path:
        return self.run_dir / "logs"

    @property
    def records(self) -> Path:
        return self.run_dir / "workers"

    @classmethod
    def of(cls, config: RunConfig) -> Paths:
        logs = config.run_dir / "logs"
        return cls(config.run_dir, config.scheduler_file or logs / "scheduler.json")


def file_locking_env(setting: str) -> tuple[tuple[str, str], ...]:
    """Environment that applies --dask-slurm-file-locking (nothing for dask-default)."""
    if setting == "dask-default":
        return ()
    return (("DASK_DISTRIBUTED__WORKER__USE_FILE_LOCKING", "True" if setting == "on" else "False"),)


#: Where the Dask HTTP servers (dashboard, /info pages, metrics: all unauthenticated)
#: listen unless --dask-slurm-dashboard-address says otherwise: loopback, a free port.
LOOPBACK_ANY_PORT = "127.0.0.1:0"


def dashboard_address(config: RunConfig) -> str:
    """The scheduler's HTTP server: it always runs (``--no-dashboard`` only drops the
    Bokeh pages), so it is kept on loopback unless the user binds it elsewhere."""
    return config.dashboard_address or LOOPBACK_ANY_PORT


def scheduler_spec(
    config: RunConfig, paths: Paths, host: str | None, python: str, owner_pid: int,
    security: RunSecurity,
) -> ProcessSpec:  # fmt: skip
    opts = SchedulerOptions(
        scheduler_file=str(paths.scheduler_file),
        host=host,
        interface=None if host else config.interface,
        # The dashboard's pages are set up at their first visit, by the preload: Dask's
        # own would import Bokeh on the way to the run's first job (worker/scheduler_preload.py).
        dashboard=False,
        dashboard_address=dashboard_address(config),
        extra_args=("--preload", SCHEDULER_PRELOAD_MODULE, *security.scheduler_args()),
    )
    pages = ((DASHBOARD_VARIABLE, "first-visit"),) if config.dashboard else ()
    # A worker silent for this long is removed (then ended: see executor/failures.py).
    ttl = ("DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL", f"{config.worker_ttl:g}s")
    return ProcessSpec(
        "Dask scheduler",
        tuple(scheduler_command(python, opts)),
        paths.logs / "scheduler.log",
        ((OWNER_VARIABLE, str(owner_pid)), ttl, *pages, *security.env()),
    )


#: Dask settings of every worker the plugin starts. Its tasks only wait for their jobs'
#: processes (worker/task.py), and Dask would keep waking for them: the statistical
#: profiler samples every running task's Python stack 100 times a second (always the same
#: wait: a profile with nothing in it), and the event-loop watch ticks 50 times a second
#: (its warning, at 3 s unresponsive, still comes with a tick a second). With 64 running
#: jobs these two were nearly all of a worker's CPU (docs/benchmarks.md, issue 31).
QUIET_WORKER_ENV = (
    ("DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED", "False"),
    ("DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL", "1s"),
)


def worker_env(
    config: RunConfig, owner_pid: int, security: RunSecurity
) -> tuple[tuple[str, str], ...]:
    return (
        (OWNER_VARIABLE, str(owner_pid)),
        *QUIET_WORKER_ENV,
        *file_locking_env(config.file_locking),
        *security.env(),
    )


# -- local mode -----------------------------------------------------------------------


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


def local_worker_spec(
    recipe: WorkerRecipe, paths: Paths, name: str, opts: WorkerOptions | None
) -> ProcessSpec:
    """Local worker ``name`` under its supervisor; ``opts`` None: its options come later
    on its stdin (:func:`early_local_workers`)."""
    return ProcessSpec(
        f"local Dask worker {name}",
        tuple(supervised_worker_command(recipe.python, recipe.supervisor_options(name), opts)),
        paths.logs / f"worker-{name}.log",
        recipe.env,
    )


def early_local_workers(
    config: RunConfig, python: str, owner_pid: int, security: RunSecurity
) -> tuple[ProcessSpec, ...]:
    """The local workers :func:`plan_local` will plan, as far as they are known before the
    cluster is: their supervisors, names, logs and environment, not their Dask options
    (which need the CPUs and memory); started before the plan (:mod:`.early`)."""
    paths = Paths.of(config)
    recipe = worker_recipe(config, paths, python, owner_pid, security)
    return tuple(
        local_worker_spec(recipe, paths, name, None)
        for name in local_worker_names(config.workers or 1)
    )


def plan_local(
    config: RunConfig, cpus: int, cpus_source: str, mem_mb: int | None, host: str,
    python: str, owner_pid: int, security: RunSecurity,
) -> ClusterSpec:  # fmt: skip
    """A scheduler and ``--dask-slurm-workers`` supervised workers on this machine."""
    paths = Paths.of(config)
    nworkers, nthreads = local_layout(cpus, config.workers)
    resources: dict[str, float] = {"cpus": nthreads}
    if mem_mb:
        resources["mem_mb"] = mem_mb // nworkers
    recipe = worker_recipe(config, paths, python, owner_pid, security)
    # The workers listen where the scheduler does (loopback unless told otherwise).
    opts = recipe.worker_options(nthreads, resources, host)
    workers = tuple(
        local_worker_spec(recipe, paths, name, opts) for name in local_worker_names(nworkers)
    )
    memory = f", {mem_mb} MB memory" if mem_mb else ""
    return ClusterSpec(
        scheduler_spec(config, paths, host, python, owner_pid, security),
        workers,
        paths.scheduler_file,
        nworkers,
        paths.records,
        config.nanny,
        f"local Dask cluster: {nworkers} worker process(es) x {nthreads} thread(s) on "
        f"this machine ({cpus} CPUs from {cpus_source}{memory})",
        config.worker_args,
    )


# -- srun mode ------------------------------------------------------------------------


def group_resources(group: NodeGroup, alloc: Allocation) -> dict[str, float]:
    """What each worker of ``group`` advertises: its share of its node's grant."""
    share = group.workers_per_node
    resources: dict[str, float] = {"cpus": group.threads_per_worker}
    if alloc.mem_mb:
        by_node = dict(zip(alloc.nodes, alloc.mem_mb, strict=True))
        resources["mem_mb"] = min(by_node[node] for node in group.nodes) // share
    gpus = alloc.gpus_per_node or 0
    if gpus and gpus < share:
        raise DaskSlurmError(
            f"Each node of {','.join(group.nodes)} has {gpus} GPU(s) but would run {share} "
            "Dask workers, so some workers would get no GPU at all. Ask for fewer workers "
            "(--dask-slurm-workers) or leave the count to the plugin (one per node)."
        )
    if gpus:
        resources["gpus"] = gpus // share
    return resources


def step_log_name(index: int, group: NodeGroup, prefix: str = "") -> str:
    return f"{prefix}workers-step{index}-{group.cpus}cpus.log"


def worker_recipe(
    config: RunConfig, paths: Paths, python: str, owner_pid: int, security: RunSecurity
) -> WorkerRecipe:
    return WorkerRecipe(
        python=python,
        scheduler_file=str(paths.scheduler_file),
        record_dir=str(paths.records),
        log_dir=str(paths.logs),
        local_directory=config.local_directory,
        interface=config.interface,
        srun_args=config.srun_args,
        extra_args=("--preload", TASK_MODULE, *security.worker_args(), *config.worker_args),
        restarts=RESTARTS if config.nanny else 0,
        env=worker_env(config, owner_pid, security),
    )


def plan_worker_steps(
    recipe: WorkerRecipe,
    alloc: Allocation,
    layout: WorkerLayout,
    srun: str,
    log_prefix: str = "",
    landing: LandingPoint | None = None,
) -> tuple[ProcessSpec, ...]:
    """One srun step of supervised workers per node size of ``alloc``; with ``landing``,
    workers that know their landing point (and advertise the runway up to it)."""
    runway: dict[str, float] = {}
    env = recipe.env
    if landing is not None:
        env = (*env, *landing.env())
        if recipe.runway_step:
            runway = advertised(landing.at, landing.now, recipe.runway_step, recipe.runway_lookback)
    steps = []
    for index, group in enumerate(layout.groups):
        resources = group_resources(group, alloc) | runway
        opts = recipe.worker_options(group.threads_per_worker, resources)
        supervisor = recipe.supervisor_options(indexed=group.workers_per_node > 1)
        payload = supervised_worker_command(recipe.python, supervisor, opts)
        argv = srun_step_command(
            group, job_name=STEP_NAME, srun_args=recipe.srun_args, payload=payload, srun=srun
        )
        steps.append(
            ProcessSpec(
                f"srun step for {','.join(group.nodes)}",
                tuple(argv),
                Path(recipe.log_dir) / step_log_name(index, group, log_prefix),
                env,
            )
        )
    return tuple(steps)


def sample_worker_argv(recipe: WorkerRecipe) -> list[str]:
    """One worker's command as a worker job would start it (for the preflight check)."""
    opts = recipe.worker_options(1, {"cpus": 1.0})
    return supervised_worker_command(recipe.python, recipe.supervisor_options(), opts)


def plan_srun(
    config: RunConfig, alloc: Allocation, layout: WorkerLayout, host: str | None,
    srun: str, python: str, owner_pid: int, security: RunSecurity,
    landing: LandingPoint | None = None, runway_step: int | None = None,
) -> ClusterSpec:  # fmt: skip
    """A scheduler here and one srun step of supervised workers per node size (landing
    at ``landing``, advertising the runway of ``runway_step`` if given)."""
    paths = Paths.of(config)
    recipe = worker_recipe(config, paths, python, owner_pid, security)
    recipe = dataclasses.replace(recipe, runway_step=runway_step)
    return ClusterSpec(
        scheduler_spec(config, paths, host, python, owner_pid, security),
        plan_worker_steps(recipe, alloc, layout, srun, landing=landing),
        paths.scheduler_file,
        layout.total_workers,
        paths.records,
        config.nanny,
        f"srun Dask cluster in SLURM job {alloc.job_id}: {layout.total_workers} "
        f"worker(s) on {len(alloc.nodes)} node(s) in {len(layout.groups)} srun step(s)",
        config.worker_args,
        config.srun_args,
    )


# -- sbatch mode: the scheduler here, every worker from worker jobs ------------------------


def plan_scheduler_only(
    config: RunConfig, host: str | None, python: str, owner_pid: int, security: RunSecurity
) -> ClusterSpec:
    """Only the scheduler: the workers come from worker jobs (:mod:`.worker_jobs`)."""
    paths = Paths.of(config)
    return ClusterSpec(
        scheduler_spec(config, paths, host, python, owner_pid, security),
        (),
        paths.scheduler_file,
        0,
        paths.records,
        config.nanny,
        "Dask scheduler on this host; every worker comes from worker jobs (sbatch)",
    )


def render(spec: ClusterSpec) -> str:
    """The whole plan as text a user could paste: each process's command (``shlex.join``),
    log and added environment (for the golden-file test, and for debugging)."""
    lines = [f"# {spec.description}", f"# waits for {spec.expected_workers} worker(s)"]
    for process in (spec.scheduler, *spec.workers):
        lines += [
            f"## {process.name} (log: {process.log_path})",
            *(f"{name}={value}" for name, value in process.env),
            shlex.join(process.argv),
        ]
    return "\n".join(lines) + "\n"
