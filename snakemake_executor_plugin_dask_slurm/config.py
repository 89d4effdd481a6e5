"""Check the settings and resolve them, once, into a frozen :class:`RunConfig`.

Pure: takes the settings object and the environment as plain values, reads nothing else.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .errors import DaskSlurmError
from .settings import CLUSTER_CHOICES, FILE_LOCKING_CHOICES, ExecutorSettings


@dataclass(frozen=True)
class RunConfig:
    """Everything the plugin needs to know about this run, resolved."""

    cluster: str  # "local", "srun", "sbatch" or "attach"
    cluster_reason: str  # why, for the log
    workers: int | None
    cpus: int | None
    scheduler_file: Path | None
    scheduler_address: str | None
    run_dir: Path
    interface: str | None
    scheduler_host: str | None
    local_directory: str | None
    file_locking: str
    startup_timeout: float
    srun_args: tuple[str, ...]
    worker_args: tuple[str, ...]
    direct_shell: bool
    nanny: bool
    dashboard: bool
    #: Where the scheduler's HTTP server listens (None: loopback, a free port).
    dashboard_address: str | None
    #: Seconds before the allocation's end to land at (0: the clock is not watched).
    landing_margin: float
    #: Seconds added to a job's expected duration when placing it.
    runtime_margin: float
    #: Plain TCP instead of this run's own TLS credentials (--dask-slurm-insecure).
    insecure: bool
    #: attach: the TLS files given (None: the user's Dask configuration).
    tls_files: tuple[str | None, str | None, str | None]
    #: Worker jobs that grow the farm (None: no growth).
    growth: GrowthConfig | None = None
    #: Settings this mode cannot honour, each a sentence saying it is ignored and why.
    warnings: tuple[str, ...] = ()
    #: Seconds without a heartbeat after which a worker counts as stopped (Dask's worker-ttl).
    worker_ttl: float = 30.0
    #: Where each run's usage report goes, in a subdirectory of its own (None: no report).
    usage_report_dir: Path | None = None
    #: General-way jobs run on the warm path where they can (--dask-slurm-no-warm: never).
    warm: bool = True
    #: Seconds between progress lines (0: none; the status file is written anyway).
    status_interval: float = 60.0
    #: Most jobs per Dask task (1: one per task): see dispatch/batching.py.
    batch_size: int = 16


#: The usage reports' directory inside the run directory, unless set.
USAGE_REPORT_DIR = "usage"
#: The least --dask-slurm-worker-ttl (seconds). Dask's workers heartbeat every 0.5 s with
#: up to 10 workers (1 s up to 50, 2 s up to 200, n / 200 + 1 s beyond:
#: ``distributed.scheduler.heartbeat_interval``), and the scheduler waits for at least 10
#: of them whatever its worker-ttl (``Scheduler.check_worker_ttl``): a smaller value is
#: raised to 5 s by Dask without a word, and fewer heartbeats would take a worker busy for
#: a moment for a stopped one.
MIN_WORKER_TTL = 5
#: Most worker jobs at once with --dask-slurm-cluster sbatch unless set.
SBATCH_MODE_WORKER_JOBS = 4


@dataclass(frozen=True)
class GrowthConfig:
    """The worker jobs' settings, resolved."""

    max_jobs: int
    nodes: int
    cpus_per_node: int | None  # None: whole nodes
    time_limit: str | None
    partition: str | None
    account: str | None
    sbatch_args: tuple[str, ...]
    idle_seconds: float
    #: sbatch mode: every worker comes from worker jobs (they cannot be turned off).
    only_source: bool = False

    @property
    def way_out(self) -> str:
        """What a user can do instead of fixing the worker jobs' settings."""
        if self.only_source:
            return (
                "or run inside an allocation (salloc or an sbatch script) without "
                "--dask-slurm-cluster sbatch"
            )
        return "or run without --dask-slurm-worker-jobs"


def resolve_growth(settings: ExecutorSettings, cluster: str) -> GrowthConfig | None:
    jobs = settings.worker_jobs
    if jobs is None:
        jobs = SBATCH_MODE_WORKER_JOBS if cluster == "sbatch" else 0
    if jobs < 0:
        raise DaskSlurmError(f"--dask-slurm-worker-jobs must be 0 or more, got {jobs}.")
    if cluster == "sbatch" and jobs == 0:
        raise DaskSlurmError(
            "--dask-slurm-cluster sbatch starts every worker from worker jobs, but "
            "--dask-slurm-worker-jobs is 0. Allow at least one (e.g. 4)."
        )
    if jobs == 0:
        return None
    if cluster not in ("srun", "sbatch"):
        raise DaskSlurmError(
            f"--dask-slurm-worker-jobs grows a farm inside a SLURM allocation (srun mode) or "
            f"from a login node (--dask-slurm-cluster sbatch), not in {cluster} mode. Run "
            "inside an allocation, or add --dask-slurm-cluster sbatch."
        )
    _check_positive("--dask-slurm-worker-job-nodes", settings.worker_job_nodes)
    _check_positive("--dask-slurm-worker-job-cpus", settings.worker_job_cpus)
    if settings.worker_job_idle < 0:
        raise DaskSlurmError(
            "--dask-slurm-worker-job-idle must be 0 or more seconds, got "
            f"{settings.worker_job_idle}."
        )
    return GrowthConfig(
        max_jobs=jobs,
        nodes=settings.worker_job_nodes,
        cpus_per_node=settings.worker_job_cpus,
        time_limit=settings.worker_job_time,
        partition=settings.worker_job_partition,
        account=settings.worker_job_account,
        sbatch_args=_split("--dask-slurm-sbatch-args", settings.sbatch_args),
        idle_seconds=float(settings.worker_job_idle),
        only_source=cluster == "sbatch",
    )


def choose_cluster(requested: str, env: Mapping[str, str]) -> tuple[str, str]:
    """Resolve ``--dask-slurm-cluster`` to a concrete source and say why."""
    job_id = env.get("SLURM_JOB_ID")
    if requested == "auto":
        if job_id:
            return "srun", f"inside SLURM allocation {job_id}"
        return "local", "no SLURM allocation (SLURM_JOB_ID is not set)"
    if requested == "srun" and not job_id:
        raise DaskSlurmError(
            "--dask-slurm-cluster srun needs a SLURM allocation, but SLURM_JOB_ID is not "
            "set: this process is not inside one. Outside an allocation srun would queue "
            "a new job and wait. Run Snakemake inside one, e.g. 'salloc -N2 --exclusive "
            "snakemake --executor dask-slurm --jobs 500' or from an sbatch script, or use "
            "--dask-slurm-cluster local."
        )
    return requested, "requested with --dask-slurm-cluster"


def _split(option: str, value: str | None) -> tuple[str, ...]:
    if not value:
        return ()
    try:
        return tuple(shlex.split(value))
    except ValueError as e:
        raise DaskSlurmError(f"Cannot split {option} {value!r} into arguments: {e}.") from e


def _check_choice(option: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise DaskSlurmError(f"Invalid {option} {value!r}. Valid values are: {', '.join(choices)}.")


def _check_positive(option: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise DaskSlurmError(f"{option} must be at least 1, got {value}.")


def _check_worker_ttl(ttl: int) -> None:
    if ttl < MIN_WORKER_TTL:
        raise DaskSlurmError(
            f"--dask-slurm-worker-ttl must be at least {MIN_WORKER_TTL} seconds, got {ttl}. "
            "Dask's workers heartbeat every 0.5 s (with up to 10 workers; 1 s with up to 50, "
            "2 s with up to 200, longer beyond), and Dask counts a worker as stopped only "
            f"after 10 heartbeats are missed, so it never notices one sooner than "
            f"{MIN_WORKER_TTL} s whatever is given here; fewer heartbeats would take a worker "
            f"that is busy for a moment for a stopped one. Give {MIN_WORKER_TTL} or more "
            "(30 by default)."
        )


def _check_attach(settings: ExecutorSettings) -> None:
    if not settings.scheduler_file and not settings.scheduler_address:
        raise DaskSlurmError(
            "--dask-slurm-cluster attach needs a scheduler to attach to: give "
            "--dask-slurm-scheduler-file PATH or --dask-slurm-scheduler-address "
            "tcp://HOST:PORT."
        )
    if settings.scheduler_file and settings.scheduler_address:
        raise DaskSlurmError(
            "Give either --dask-slurm-scheduler-file or --dask-slurm-scheduler-address "
            "for --dask-slurm-cluster attach, not both."
        )


_ADDRESS = re.compile(r"^(?:[a-z]+://)?[^\s/:]+(?::[^\s/]*)*:\d+$|^(?:[a-z]+://)?\[[^\]]+\]:\d+$")


def _check_address(address: str | None) -> None:
    if address and not _ADDRESS.match(address):
        raise DaskSlurmError(
            f"Invalid --dask-slurm-scheduler-address {address!r}: expected "
            "PROTOCOL://HOST:PORT, e.g. tcp://10.0.0.5:8786 (the address a scheduler prints "
            "as 'Scheduler at:')."
        )


def _check_dashboard_address(address: str | None) -> None:
    if address and not re.match(r"^(?:[^\s/:]*|\[[^\]]+\]):\d+$", address):
        raise DaskSlurmError(
            f"Invalid --dask-slurm-dashboard-address {address!r}: expected HOST:PORT or "
            ":PORT, e.g. 127.0.0.1:8787, or :8787 for every interface."
        )


#: Settings that only some modes use: (flag, field, the modes that honour it).
_MODE_SETTINGS = (
    ("--dask-slurm-workers", "workers", ("local", "srun")),
    ("--dask-slurm-sbatch-args", "sbatch_args", ("srun", "sbatch")),
    ("--dask-slurm-worker-job-partition", "worker_job_partition", ("srun", "sbatch")),
    ("--dask-slurm-worker-job-account", "worker_job_account", ("srun", "sbatch")),
    ("--dask-slurm-worker-job-time", "worker_job_time", ("srun", "sbatch")),
    ("--dask-slurm-worker-job-cpus", "worker_job_cpus", ("srun", "sbatch")),
    ("--dask-slurm-cpus", "cpus", ("local",)),
    ("--dask-slurm-interface", "interface", ("local", "srun", "sbatch")),
    ("--dask-slurm-scheduler-host", "scheduler_host", ("local", "srun", "sbatch")),
    ("--dask-slurm-local-directory", "local_directory", ("local", "srun", "sbatch")),
    ("--dask-slurm-srun-args", "srun_args", ("srun", "sbatch")),
    ("--dask-slurm-worker-args", "worker_args", ("local", "srun", "sbatch")),
    ("--dask-slurm-nanny", "nanny", ("local", "srun", "sbatch")),
    ("--dask-slurm-no-dashboard", "no_dashboard", ("local", "srun", "sbatch")),
    ("--dask-slurm-dashboard-address", "dashboard_address", ("local", "srun", "sbatch")),
    ("--dask-slurm-insecure", "insecure", ("local", "srun", "sbatch")),
    ("--dask-slurm-tls-ca-file", "tls_ca_file", ("attach",)),
    ("--dask-slurm-tls-cert", "tls_cert", ("attach",)),
    ("--dask-slurm-tls-key", "tls_key", ("attach",)),
)
_MODE_WORDS = {
    "local": "on the local cluster (it applies to",
    "srun": "inside an allocation, where the workers use what SLURM granted each node (it "
    "applies to",
    "sbatch": "with --dask-slurm-cluster sbatch, where every worker comes from a worker "
    "job (it applies to",
    "attach": "when attaching to a scheduler the plugin does not start (it applies to",
}


def _and(words: tuple[str, ...]) -> str:
    """("local", "srun", "sbatch") -> "local, srun and sbatch"."""
    return " and ".join(words) if len(words) < 3 else f"{', '.join(words[:-1])} and {words[-1]}"


def ignored_settings(settings: ExecutorSettings, cluster: str) -> tuple[str, ...]:
    """A warning for each setting given that ``cluster`` does not use."""
    found = []
    for flag, field, modes in _MODE_SETTINGS:
        if getattr(settings, field) and cluster not in modes:
            found.append(f"{flag} is ignored {_MODE_WORDS[cluster]} {_and(modes)} mode).")
    if settings.file_locking != "dask-default" and cluster == "attach":
        found.append(
            f"--dask-slurm-file-locking is ignored {_MODE_WORDS['attach']} local and srun mode)."
        )
    return tuple(found)


def _check_values(settings: ExecutorSettings) -> None:
    """Each setting checked on its own (a choice, a count, a duration, an address)."""
    _check_choice("--dask-slurm-cluster", settings.cluster, CLUSTER_CHOICES)
    _check_choice("--dask-slurm-file-locking", settings.file_locking, FILE_LOCKING_CHOICES)
    _check_positive("--dask-slurm-workers", settings.workers)
    _check_positive("--dask-slurm-cpus", settings.cpus)
    _check_positive("--dask-slurm-startup-timeout", settings.startup_timeout)
    _check_positive("--dask-slurm-batch-size", settings.batch_size)
    _check_worker_ttl(settings.worker_ttl)
    for option, value in (
        ("--dask-slurm-landing-margin", settings.landing_margin),
        ("--dask-slurm-runtime-margin", settings.runtime_margin),
        ("--dask-slurm-status-interval", settings.status_interval),
    ):
        if value < 0:
            raise DaskSlurmError(f"{option} must be 0 or more seconds, got {value}.")
    _check_dashboard_address(settings.dashboard_address)


def _check_scheduler_address(settings: ExecutorSettings, cluster: str) -> None:
    if cluster == "attach":
        _check_attach(settings)
        _check_address(settings.scheduler_address)
    elif settings.scheduler_address:
        raise DaskSlurmError(
            "--dask-slurm-scheduler-address only applies to --dask-slurm-cluster attach; "
            f"this run starts its own scheduler ({cluster})."
        )


def _usage_report_dir(
    settings: ExecutorSettings, run_dir: Path, workdir: Path
) -> tuple[Path | None, tuple[str, ...]]:
    """Where the usage report goes (None: off), and a warning for a setting it ignores."""
    if not settings.no_usage_report:
        return workdir / (settings.usage_report_dir or run_dir / USAGE_REPORT_DIR), ()
    if settings.usage_report_dir:
        return None, (
            "--dask-slurm-usage-report-dir is ignored: --dask-slurm-no-usage-report turns "
            "the report off.",
        )
    return None, ()


def resolve(settings: ExecutorSettings, env: Mapping[str, str], workdir: Path) -> RunConfig:
    """Validate ``settings`` and return the run's configuration."""
    _check_values(settings)
    cluster, reason = choose_cluster(settings.cluster, env)
    _check_scheduler_address(settings, cluster)
    run_dir = Path(settings.run_dir) if settings.run_dir else Path(".snakemake", "dask-slurm")
    if not run_dir.is_absolute():
        run_dir = workdir / run_dir
    usage_report_dir, report_warnings = _usage_report_dir(settings, run_dir, workdir)
    warnings = ignored_settings(settings, cluster) + report_warnings
    return RunConfig(
        cluster=cluster,
        cluster_reason=reason,
        workers=settings.workers,
        cpus=settings.cpus,
        scheduler_file=Path(settings.scheduler_file) if settings.scheduler_file else None,
        scheduler_address=settings.scheduler_address,
        run_dir=run_dir,
        interface=settings.interface,
        scheduler_host=settings.scheduler_host,
        local_directory=settings.local_directory,
        file_locking=settings.file_locking,
        startup_timeout=float(settings.startup_timeout),
        srun_args=_split("--dask-slurm-srun-args", settings.srun_args),
        worker_args=_split("--dask-slurm-worker-args", settings.worker_args),
        direct_shell=not settings.no_direct_shell,
        nanny=settings.nanny,
        dashboard=not settings.no_dashboard,
        dashboard_address=settings.dashboard_address,
        insecure=settings.insecure,
        landing_margin=float(settings.landing_margin),
        runtime_margin=float(settings.runtime_margin),
        worker_ttl=float(settings.worker_ttl),
        tls_files=tuple(  # type: ignore[arg-type]
            str(p) if p else None
            for p in (settings.tls_ca_file, settings.tls_cert, settings.tls_key)
        ),
        growth=resolve_growth(settings, cluster),
        warnings=warnings,
        usage_report_dir=usage_report_dir,
        warm=not settings.no_warm,
        status_interval=float(settings.status_interval),
        batch_size=int(settings.batch_size),
    )
