"""Argument lists for every command the plugin starts: one small builder per command.

Pure: each builder takes an interpreter path and a frozen options object (or a node group)
and returns ``list[str]`` for ``subprocess`` without a shell. Nothing here runs anything.

Every Dask option the plugin passes is written here, so :func:`dask_option_names` can hand
exactly that set to the preflight check. Options that are not modelled as fields go in
``extra_args``; security (TLS: ``--tls-ca-file``, ``--tls-cert``, ``--tls-key``,
``--protocol tls``) comes from :mod:`.security` into the ``extra_args`` of both option
objects, so it is decided in one place and preflight checks it like everything else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..worker import DASK_MAIN_MODULE, DASK_WORKER_MODULE, SUPERVISOR_MODULE

SCHEDULER_MODULE = "distributed.cli.dask_scheduler"
WORKER_MODULE = DASK_WORKER_MODULE


@dataclass(frozen=True)
class SchedulerOptions:
    """What the scheduler is told. Its HTTP server (``dashboard_address``) runs even
    without the dashboard's Bokeh pages (``dashboard`` False)."""

    scheduler_file: str
    host: str | None = None
    interface: str | None = None
    port: int = 0  # 0: a free port, so two runs on one login node cannot collide
    dashboard: bool = True
    dashboard_address: str = "127.0.0.1:0"
    extra_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class WorkerOptions:
    """What each ``dask worker`` is told. One process, no nanny: the plugin's supervisor
    starts it, names it, and ends what its jobs leave behind (see :mod:`..worker.supervisor`)."""

    scheduler_file: str
    nthreads: int
    resources: tuple[tuple[str, float], ...] = ()
    local_directory: str | None = None
    interface: str | None = None
    #: The address the worker listens on (local mode: the scheduler's, e.g. loopback);
    #: None: every interface, as Dask does (srun mode, where the scheduler must reach it).
    host: str | None = None
    death_timeout: float = 60.0
    # "0" turns off Dask's memory management: rule jobs are child processes whose memory
    # the worker does not count, so its limit would only mislead.
    memory_limit: str = "0"
    dashboard: bool = False  # one dashboard per worker is rarely wanted
    # Each worker serves HTTP (health, metrics, profiles) even without a dashboard:
    # unauthenticated, so on loopback only.
    dashboard_address: str = "127.0.0.1:0"
    extra_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class SupervisorOptions:
    """What the supervisor of one worker is told."""

    record_dir: str
    name: str | None = None  # None: the SLURM node's name (srun steps)
    indexed: bool = False  # append the task's index on its node (several workers a node)
    restarts: int = 0  # how often to restart a worker killed by a signal
    job_prefix: bool = False  # name it j<SLURM job id>-<node> (workers of worker jobs)


def _cli_number(value: float) -> str:
    """``4.0`` -> ``4``, ``0.5`` -> ``0.5``: Dask parses both, people read the first."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def resources_option(resources: Sequence[tuple[str, float]]) -> str:
    """``(("mem_mb", 2000), ("cpus", 4))`` -> ``cpus=4,mem_mb=2000`` (sorted by name)."""
    for name, _ in resources:
        if not name or any(c in name for c in "=, "):
            raise ValueError(
                f"Dask resource name {name!r} cannot be passed to 'dask worker "
                "--resources': names must be non-empty and contain no '=', ',' or space"
            )
    return ",".join(f"{name}={_cli_number(value)}" for name, value in sorted(resources))


def _option(flag: str, value: str | None) -> list[str]:
    return [flag, value] if value is not None else []


def scheduler_command(python: str, opts: SchedulerOptions) -> list[str]:
    """``python -m ...dask_main distributed.cli.dask_scheduler ...`` for this run's scheduler."""
    if opts.host is not None and opts.interface is not None:
        # Dask itself refuses both ("Can not specify both interface and host").
        raise ValueError(
            f"The scheduler can bind to a host ({opts.host}) or an interface "
            f"({opts.interface}), not both: set only one of them."
        )
    # The scheduler's HTTP server runs even with --no-dashboard (which only drops the
    # Bokeh pages), on :8787 of every interface unless told otherwise.
    dashboard = ["--dashboard-address", opts.dashboard_address]
    if not opts.dashboard:
        dashboard.append("--no-dashboard")
    return [
        python,
        "-m",
        DASK_MAIN_MODULE,  # Dask's command, as with -m, without NumPy (worker/dask_main.py)
        SCHEDULER_MODULE,
        "--scheduler-file",
        opts.scheduler_file,
        *_option("--host", opts.host),
        *_option("--interface", opts.interface),
        "--port",
        str(opts.port),
        *dashboard,
        *opts.extra_args,
    ]


def worker_args(opts: WorkerOptions) -> list[str]:
    """The ``dask worker`` options alone, without interpreter and module."""
    if opts.nthreads < 1:
        raise ValueError(f"A Dask worker needs at least one thread, got {opts.nthreads}")
    resources = resources_option(opts.resources) if opts.resources else None
    return [
        "--scheduler-file",
        opts.scheduler_file,
        "--nthreads",
        str(opts.nthreads),
        *_option("--resources", resources),
        *_option("--local-directory", opts.local_directory),
        *_option("--interface", opts.interface),
        *_option("--host", opts.host),
        "--no-nanny",
        "--death-timeout",
        _cli_number(opts.death_timeout),
        "--memory-limit",
        opts.memory_limit,
        "--dashboard" if opts.dashboard else "--no-dashboard",
        "--dashboard-address",
        opts.dashboard_address,
        *opts.extra_args,
    ]


def supervised_worker_command(
    python: str, supervisor: SupervisorOptions, opts: WorkerOptions | None
) -> list[str]:
    """``python -m ...supervisor <its options> -- <dask worker options>``: one worker
    under the plugin's supervisor, which adds ``--name`` (given, or the node's name).
    ``opts`` None: the worker's options come later on its stdin
    (``--worker-args-on-stdin``, :func:`deferred_options`)."""
    return [
        python,
        "-m",
        SUPERVISOR_MODULE,
        *_option("--name", supervisor.name),
        *(["--indexed"] if supervisor.indexed else []),
        *(["--job-prefix"] if supervisor.job_prefix else []),
        "--record-dir",
        supervisor.record_dir,
        "--restarts",
        str(supervisor.restarts),
        *(["--worker-args-on-stdin"] if opts is None else []),
        "--",
        *(worker_args(opts) if opts is not None else []),
    ]


def deferred_options(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """A :func:`supervised_worker_command` split in two: the command that starts the
    supervisor and its worker before their options are known (``opts`` None), and those
    options (what the worker is sent on its stdin)."""
    split = list(argv).index("--")
    head, tail = list(argv[:split]), list(argv[split + 1 :])
    return [*head, "--worker-args-on-stdin", "--"], tail


def dask_option_names(argv: Sequence[str]) -> tuple[str, ...]:
    """The ``--options`` in a Dask command line, in order, for the preflight check (in a
    supervised worker's command, those after its ``--``)."""
    if "--" in argv:
        argv = argv[list(argv).index("--") + 1 :]
    return tuple(dict.fromkeys(a.split("=", 1)[0] for a in argv if a.startswith("--")))
