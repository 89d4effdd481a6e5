"""The contenders: how each one runs a workflow, as Snakemake arguments.

Every contender runs the same generated workflow through the same wrapper
(``instrumented_snakemake.py``), so they differ only in the arguments below and in
whether they run inside a SLURM allocation on the project's test cluster.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The settings for many thin rules that the plugin applies itself when the user chose none
#: (docs/further.md "Fast thin jobs"), given explicitly.
RECOMMENDED = (
    "--jobs",
    "unlimited",
    "--scheduler",
    "greedy",
    "--scheduler-subsample",
    "500",
    "--max-jobs-per-timespan",
    "100000/1s",
)
#: Every rule the general way, warm (Snakemake's job command forked from a process that
#: parsed the workflow once), with the recommended settings.
WARM_WAY = (
    "--executor",
    "dask-slurm",
    "--dask-slurm-cluster",
    "local",
    *RECOMMENDED,
    "--dask-slurm-no-direct-shell",
)
#: Every rule the general way, cold (a fresh Snakemake per rule).
GENERAL_WAY = (*WARM_WAY, "--dask-slurm-no-warm")
#: Set for a run: the wrapper leaves Snakemake's default general args (no exit-wait cut).
KEEP_EXIT_WAIT_ENV = "DASK_SLURM_BENCH_KEEP_EXIT_WAIT"
#: salloc arguments for the contenders that run inside an allocation.
SALLOC_ARGS = ("-N3", "--exclusive")


@dataclass(frozen=True)
class Contender:
    name: str
    description: str
    #: Snakemake arguments; "{cores}" and "{slots}" are replaced when the run is built.
    args: tuple[str, ...]
    in_allocation: bool = False
    #: The dask-slurm executor runs, so the wrapper's timestamps apply.
    dask: bool = False
    #: Runs each rule through a fresh Snakemake: run at most this many rules.
    max_rules: int | None = None
    #: Extra environment of the run (read by the wrapper, ``instrumented_snakemake.py``).
    env: tuple[tuple[str, str], ...] = ()

    def snakemake_args(self, cores: int, slots: int) -> list[str]:
        return [a.format(cores=cores, slots=slots) for a in self.args]


CONTENDERS = (
    Contender(
        "local-default",
        "Snakemake's local executor, --cores {cores}, default (ilp) scheduler",
        ("--cores", "{cores}"),
    ),
    Contender(
        "local-greedy",
        "Snakemake's local executor, --cores {cores} --scheduler greedy",
        ("--cores", "{cores}", "--scheduler", "greedy"),
    ),
    Contender(
        "dask-local",
        "dask-slurm, local cluster, plain --jobs {cores}",
        ("--executor", "dask-slurm", "--dask-slurm-cluster", "local", "--jobs", "{cores}"),
        dask=True,
    ),
    Contender(
        "dask-local-jobs100",
        "dask-slurm, local cluster, what a user types first: --jobs 100",
        ("--executor", "dask-slurm", "--dask-slurm-cluster", "local", "--jobs", "100"),
        dask=True,
    ),
    Contender(
        "dask-local-jobs100-db",
        "dask-local-jobs100 with Snakemake's SQLite persistence (--persistence-backend db) "
        "instead of its files",
        (
            "--executor",
            "dask-slurm",
            "--dask-slurm-cluster",
            "local",
            "--jobs",
            "100",
            "--persistence-backend",
            "db",
        ),
        dask=True,
    ),
    Contender(
        "dask-local-unlimited",
        "dask-slurm, local cluster, --jobs unlimited and nothing else",
        ("--executor", "dask-slurm", "--dask-slurm-cluster", "local", "--jobs", "unlimited"),
        dask=True,
    ),
    Contender(
        "dask-local-rec",
        "dask-slurm, local cluster, recommended settings",
        ("--executor", "dask-slurm", "--dask-slurm-cluster", "local", *RECOMMENDED),
        dask=True,
    ),
    Contender(
        "dask-local-rec-insecure",
        "dask-local-rec without TLS (--dask-slurm-insecure): what TLS costs",
        (
            "--executor",
            "dask-slurm",
            "--dask-slurm-cluster",
            "local",
            *RECOMMENDED,
            "--dask-slurm-insecure",
        ),
        dask=True,
    ),
    Contender(
        "dask-local-rec-noreport",
        "dask-local-rec without the usage report (--dask-slurm-no-usage-report): what the "
        "report costs",
        (
            "--executor",
            "dask-slurm",
            "--dask-slurm-cluster",
            "local",
            *RECOMMENDED,
            "--dask-slurm-no-usage-report",
        ),
        dask=True,
    ),
    Contender(
        "dask-local-general",
        "dask-slurm, local cluster, recommended settings, every rule the general way, cold "
        "(a Snakemake per rule: --dask-slurm-no-direct-shell --dask-slurm-no-warm)",
        GENERAL_WAY,
        dask=True,
        max_rules=30,
    ),
    Contender(
        "dask-local-warm",
        "dask-slurm, local cluster, recommended settings, every rule the general way, warm "
        "(Snakemake's job command forked from a process that parsed the workflow once: "
        "--dask-slurm-no-direct-shell)",
        WARM_WAY,
        dask=True,
    ),
    Contender(
        "dask-local-general-exitwait",
        "dask-local-general without the plugin's cut of the spawned Snakemake's exit wait "
        "(its job-rate limiter's timer, ~0.65 s here)",
        GENERAL_WAY,
        dask=True,
        max_rules=30,
        env=((KEEP_EXIT_WAIT_ENV, "1"),),
    ),
    Contender(
        "dask-srun",
        "dask-slurm, srun cluster in salloc -N3 --exclusive, plain --jobs {slots}",
        ("--executor", "dask-slurm", "--dask-slurm-cluster", "srun", "--jobs", "{slots}"),
        in_allocation=True,
        dask=True,
    ),
    Contender(
        "dask-srun-jobs100",
        "dask-slurm, srun cluster in salloc -N3 --exclusive, what a user types first: --jobs 100",
        ("--executor", "dask-slurm", "--dask-slurm-cluster", "srun", "--jobs", "100"),
        in_allocation=True,
        dask=True,
    ),
    Contender(
        "dask-srun-rec",
        "dask-slurm, srun cluster in salloc -N3 --exclusive, recommended settings",
        ("--executor", "dask-slurm", "--dask-slurm-cluster", "srun", *RECOMMENDED),
        in_allocation=True,
        dask=True,
    ),
    Contender(
        "dask-srun-rec-insecure",
        "dask-srun-rec without TLS (--dask-slurm-insecure): what TLS costs",
        (
            "--executor",
            "dask-slurm",
            "--dask-slurm-cluster",
            "srun",
            *RECOMMENDED,
            "--dask-slurm-insecure",
        ),
        in_allocation=True,
        dask=True,
    ),
    Contender(
        "jobstep",
        "snakemake-executor-plugin-slurm-jobstep in salloc -N3 --exclusive, --jobs {slots}",
        ("--executor", "slurm-jobstep", "--jobs", "{slots}"),
        in_allocation=True,
        max_rules=30,
    ),
)
BY_NAME = {c.name: c for c in CONTENDERS}
LOCAL_NAMES = tuple(c.name for c in CONTENDERS if not c.in_allocation)


def parse_contenders(text: str) -> list[Contender]:
    """``"local-greedy,dask-local"`` -> those contenders; unknown names are refused."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise ValueError(
            f"Unknown contender(s): {', '.join(unknown)}. Valid contenders are: "
            f"{', '.join(BY_NAME)}."
        )
    return [BY_NAME[n] for n in names]
