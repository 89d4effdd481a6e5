"""Snakemake executor plugin: run a workflow's jobs as Dask tasks, on this machine or on
every node of a SLURM allocation (workers started with srun).

This module only names what Snakemake looks for; the work is done in the modules it
imports (see docs/architecture.md).
"""

from snakemake_interface_executor_plugins.settings import CommonSettings

from .executor import Executor
from .settings import ExecutorSettings

__all__ = ["Executor", "ExecutorSettings", "common_settings"]

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
