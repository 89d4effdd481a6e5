"""The plugin's settings: one dataclass, one field per ``--dask-slurm-<name>`` flag.

Snakemake turns each field into a command-line flag (``--dask-slurm-workers``), a profile
key (``dask-slurm-workers: 8``) and, where ``env_var`` is set, an environment variable
(``SNAKEMAKE_DASK_SLURM_WORKERS``). Every boolean defaults to False: a True default makes
Snakemake's argument parser emit an unprefixed ``--no-<name>`` flag that then breaks
start-up. Values are checked and resolved once, in :mod:`.config`.

Types are spelled ``Optional[X]``: Snakemake's settings parser understands
``typing.Optional`` but not the ``X | None`` union syntax.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from snakemake_interface_executor_plugins.settings import CommonSettings, ExecutorSettingsBase

CLUSTER_CHOICES = ("auto", "local", "srun", "sbatch", "attach")
FILE_LOCKING_CHOICES = ("dask-default", "on", "off")


@dataclass
class ExecutorSettings(ExecutorSettingsBase):
    cluster: str = field(
        default="auto",
        metadata={
            "help": "Where the Dask cluster comes from. 'auto': srun inside a SLURM "
            "allocation, local outside one. 'local': scheduler and workers on this "
            "machine. 'srun': workers on every allocated node, started with srun. "
            "'sbatch' (never chosen by 'auto'): the scheduler on this host (e.g. a login "
            "node), every worker from worker jobs submitted with sbatch (see "
            "--dask-slurm-worker-jobs). 'attach': connect to a scheduler somebody else runs (see "
            "--dask-slurm-scheduler-file / --dask-slurm-scheduler-address); it is "
            "never stopped by the plugin.",
            "env_var": True,
            "choices": list(CLUSTER_CHOICES),
        },
    )
    workers: Optional[int] = field(
        default=None,
        metadata={
            "help": "Total number of Dask worker processes. Default: one per node "
            "(srun) or one on this machine (local), each with one thread per CPU it "
            "was granted. An explicit count is split across nodes in proportion to "
            "their CPUs.",
            "env_var": True,
        },
    )
    cpus: Optional[int] = field(
        default=None,
        metadata={
            "help": "Local mode only: CPUs the local workers may use in total. "
            "Default: what this process may run on (affinity and cgroup quota), or "
            "what SLURM granted on this node inside an allocation.",
            "env_var": True,
        },
    )
    scheduler_file: Optional[Path] = field(
        default=None,
        metadata={
            "help": "attach: the scheduler file to connect with. srun/local: where the "
            "plugin's scheduler writes its file (default: inside the run directory, "
            "which must be on a filesystem the nodes share).",
            "env_var": True,
        },
    )
    scheduler_address: Optional[str] = field(
        default=None,
        metadata={
            "help": "attach: address of a running scheduler, e.g. tcp://10.0.0.5:8786.",
            "env_var": True,
        },
    )
    run_dir: Optional[Path] = field(
        default=None,
        metadata={
            "help": "Directory for the scheduler file and the scheduler, worker and "
            "job logs (default .snakemake/dask-slurm/ in the working directory; the "
            "nodes must be able to read it).",
            "env_var": True,
        },
    )
    interface: Optional[str] = field(
        default=None,
        metadata={
            "help": "Network interface for the scheduler and workers, e.g. ib0. "
            "Default: the scheduler listens on the address on the route to the "
            "allocated nodes.",
            "env_var": True,
        },
    )
    scheduler_host: Optional[str] = field(
        default=None,
        metadata={
            "help": "Host name or address the scheduler listens on (instead of "
            "--dask-slurm-interface or the automatic choice).",
            "env_var": True,
        },
    )
    local_directory: Optional[str] = field(
        default=None,
        metadata={
            "help": "Workers' local directory, ideally node-local scratch such as "
            "/tmp or $TMPDIR (default: Dask's temporary-directory setting, else the "
            "system temporary directory of each node).",
            "env_var": True,
        },
    )
    file_locking: str = field(
        default="dask-default",
        metadata={
            "help": "Dask's worker file locking: 'dask-default' keeps your Dask "
            "configuration, 'off' avoids hangs on NFS home directories, 'on' forces it.",
            "choices": list(FILE_LOCKING_CHOICES),
        },
    )
    startup_timeout: int = field(
        default=120,
        metadata={
            "help": "Seconds to wait for the scheduler and for every expected worker "
            "to register before giving up (and stopping what was started). Default: 120.",
            "env_var": True,
        },
    )
    srun_args: Optional[str] = field(
        default=None,
        metadata={
            "help": "Extra srun options for the worker steps, e.g. '--mem=0 "
            "--cpu-bind=none' (split like a shell would, never run through one).",
        },
    )
    worker_args: Optional[str] = field(
        default=None,
        metadata={
            "help": "Extra 'dask worker' options, e.g. '--memory-limit 4GB'.",
        },
    )
    no_direct_shell: bool = field(
        default=False,
        metadata={
            "help": "Run every job through Snakemake's own job command (a fresh "
            "Snakemake per job, ~2 s each) instead of running eligible shell rules' "
            "commands directly on the worker (milliseconds each).",
        },
    )
    no_warm: bool = field(
        default=False,
        metadata={
            "help": "Run every job that is not a plain shell command (run:, script:, "
            "notebook:, wrapper:, benchmark:, shadow:, group jobs) as a fresh Snakemake "
            "per job (the cold way, ~1-3 s each) instead of in a process forked from one "
            "that imported Snakemake and parsed the workflow once beside each worker (the "
            "warm way: tens of milliseconds). Both run Snakemake's same job command; jobs "
            "the warm way cannot run identically go the cold way anyway, counted at the end.",
        },
    )
    nanny: bool = field(
        default=False,
        metadata={
            "help": "Restart a Dask worker that dies (up to 3 times each), as Dask's nanny "
            "would. Whatever a dead worker's jobs left running is ended first either way, "
            "and its jobs run again on another worker once; without this setting the run "
            "goes on with the workers that are left, and stops when none is.",
        },
    )
    no_dashboard: bool = field(
        default=False,
        metadata={
            "help": "Do not serve the Dask dashboard's pages nor print its link. (Dask's "
            "scheduler still runs its HTTP server, on loopback by default.)"
        },
    )
    dashboard_address: Optional[str] = field(
        default=None,
        metadata={
            "help": "Where the scheduler serves the Dask dashboard. Default: loopback on "
            "the scheduler's host, a free port, reached through the SSH tunnel the plugin "
            "prints. E.g. ':8787' serves it on every interface: every page still asks for "
            "the run's token (in the link the plugin prints), but anyone who can reach "
            "that port can ask, and over plain HTTP the link and its cookie cross the "
            "network readable (serve it over HTTPS with Dask's "
            "distributed.scheduler.dashboard.tls settings, or keep the SSH tunnel).",
            "env_var": True,
        },
    )
    landing_margin: int = field(
        default=120,
        metadata={
            "help": "Inside an allocation with a time limit: seconds before its end at which "
            "the run lands (no new jobs; running jobs that cannot finish are stopped and "
            "their outputs removed; Snakemake ends normally, so the same command continues "
            "in a new allocation). Covers SLURM's KillWait (30 s by default). At most a "
            "quarter of the time left at start. Worker jobs land the same way before their "
            "own time limits (their jobs that cannot finish run again elsewhere). 0: do not "
            "watch the clock. Default: 120.",
            "env_var": True,
        },
    )
    worker_ttl: int = field(
        default=30,
        metadata={
            "help": "Seconds a Dask worker may go without a heartbeat before the run treats "
            "it as stopped (a hung node, a stopped process): no job goes to it any more, it "
            "is ended where it runs, and its jobs run again elsewhere once their processes "
            "are gone. Dask's worker-ttl: at least 5, since Dask waits for 10 missed "
            "heartbeats in any case (0.5 s apart with up to 10 workers: 5 s; 1 s apart with "
            "up to 50, 2 s with up to 200), and fewer would take a worker busy for a moment "
            "for a stopped one. Not for --dask-slurm-cluster attach (the scheduler is not "
            "ours). Default: 30.",
            "env_var": True,
        },
    )
    runtime_margin: int = field(
        default=30,
        metadata={
            "help": "Seconds added to a job's expected duration (its runtime resource, or "
            "what its rule's earlier jobs took) when deciding whether it can finish before "
            "the run lands. Default: 30.",
            "env_var": True,
        },
    )
    insecure: bool = field(
        default=False,
        metadata={
            "help": "Run the Dask cluster without TLS: plain, unauthenticated TCP, as "
            "Dask does by default. Only for a machine nobody else can reach: anyone who "
            "can connect to the scheduler can run code as you on every worker. By "
            "default each run makes its own TLS credentials, and only its own processes "
            "can connect.",
            "env_var": True,
        },
    )
    worker_jobs: Optional[int] = field(
        default=None,
        metadata={
            "help": "Grow the farm with worker jobs: at most this many sbatch jobs at once "
            "(pending and running; a worker job about to reach its time limit no longer "
            "counts once its successor is queued), each starting Dask workers on its nodes "
            "that join this run's scheduler, submitted while jobs wait for CPUs and retired "
            "when idle. Default: 0 (off) inside an allocation, 4 with --dask-slurm-cluster "
            "sbatch.",
            "env_var": True,
        },
    )
    worker_job_nodes: int = field(
        default=1,
        metadata={"help": "Nodes per worker job. Default: 1.", "env_var": True},
    )
    worker_job_cpus: Optional[int] = field(
        default=None,
        metadata={
            "help": "CPUs per node of a worker job. Default: whole nodes (--exclusive).",
            "env_var": True,
        },
    )
    worker_job_time: Optional[str] = field(
        default=None,
        metadata={
            "help": "Time limit of a worker job, in sbatch's format (e.g. 1:00:00). Each "
            "worker job lands before it (--dask-slurm-landing-margin, at most a quarter of "
            "it) and is replaced in time; a job goes only to workers with time left for it. "
            "Default: the partition's.",
            "env_var": True,
        },
    )
    worker_job_partition: Optional[str] = field(
        default=None,
        metadata={"help": "Partition of the worker jobs (default: SLURM's).", "env_var": True},
    )
    worker_job_account: Optional[str] = field(
        default=None,
        metadata={"help": "Account of the worker jobs (default: yours).", "env_var": True},
    )
    sbatch_args: Optional[str] = field(
        default=None,
        metadata={
            "help": "Extra sbatch options for the worker jobs, e.g. '--qos=short "
            "--constraint=skylake' (split into a list like a shell would, never run "
            "through one; they come last, so they win).",
        },
    )
    worker_job_idle: int = field(
        default=60,
        metadata={
            "help": "Seconds a worker job may sit idle, with no job waiting, before it is "
            "retired (its workers leave through the scheduler, then the job ends); pending "
            "worker jobs are cancelled after the same quiet time. Default: 60.",
            "env_var": True,
        },
    )
    tls_ca_file: Optional[Path] = field(
        default=None,
        metadata={
            "help": "attach: CA certificate (PEM) to check a TLS scheduler with "
            "(default: distributed.comm.tls.ca-file of your Dask configuration).",
            "env_var": True,
        },
    )
    tls_cert: Optional[Path] = field(
        default=None,
        metadata={
            "help": "attach: client certificate (PEM) to present to a TLS scheduler "
            "(default: distributed.comm.tls.client.cert of your Dask configuration).",
            "env_var": True,
        },
    )
    tls_key: Optional[Path] = field(
        default=None,
        metadata={
            "help": "attach: private key (PEM) of --dask-slurm-tls-cert (default: "
            "distributed.comm.tls.client.key of your Dask configuration; not needed when "
            "the certificate file holds the key too).",
            "env_var": True,
        },
    )
    no_usage_report: bool = field(
        default=False,
        metadata={
            "help": "Do not write the usage report at the end of the run. By default each "
            "run writes one (jobs.tsv, rules.tsv, suggested-profile.yaml, report.html: how "
            "the farm's CPUs were used, and what each rule should ask for next time, from "
            "figures measured exactly on the workers) and prints where it is.",
            "env_var": True,
        },
    )
    usage_report_dir: Optional[Path] = field(
        default=None,
        metadata={
            "help": "Where the usage reports go: each run writes its own subdirectory "
            "(<date>-<time>-<run id>), and 'latest' points at the newest. Default: usage/ "
            "in the run directory (--dask-slurm-run-dir).",
            "env_var": True,
        },
    )
    status_interval: int = field(
        default=60,
        metadata={
            "help": "Seconds between the run's progress lines ('dask-slurm: ...', shown "
            "under -q too: jobs done of the total, running, waiting, failed, lost; the rate, "
            "the expected end; workers and how busy they are). 0: no line. The status file "
            "(.snakemake/dask-slurm/status.json, read by 'python -m "
            "snakemake_executor_plugin_dask_slurm status') is written every few seconds "
            "whatever this is. Default: 60.",
            "env_var": True,
        },
    )

    batch_size: int = field(
        default=16,
        metadata={
            "help": "Most jobs one Dask task carries. Ready jobs of one rule with the same "
            "resources, handed over together (direct-way shell jobs and warm jobs; never a "
            "group or a cold job), share a Dask task: each still its own process, its end "
            "told at once, its own failure, retry and usage row; the task holds their "
            "resources until the last ends. Fewer per task where the workers are small or "
            "few jobs come at once. 1: one job per task. Default: 16.",
            "env_var": True,
        },
    )


common_settings = CommonSettings(
    # Jobs run on the Dask cluster, not in Snakemake's own process pool.
    non_local_exec=True,
    # The allocation's nodes share the working directory (as on every HPC cluster).
    implies_no_shared_fs=False,
    job_deploy_sources=False,
    # Workers inherit the environment, but declared envvars are passed explicitly too.
    pass_envvar_declarations_to_cmd=True,
    # On a shared filesystem a per-job pip install of storage plugins is pure cost.
    auto_deploy_default_storage_provider=False,
    init_seconds_before_status_checks=0,
    # Group jobs run as one task: their job command runs the group's members.
    pass_group_args=True,
    spawned_jobs_assume_shared_fs=False,
)
