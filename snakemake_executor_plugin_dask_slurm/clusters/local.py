"""The embedded default: a scheduler and supervised worker processes on this machine.

Same lifecycle as the srun source (:class:`.base.ProcessCluster`), with the workers started
directly (each under the plugin's supervisor) instead of through srun; the plan is
:func:`.spec.plan_local`. The scheduler runs as its own process rather than inside
Snakemake's, so its work never competes with Snakemake's scheduling thread for the
interpreter lock. It listens on loopback unless --dask-slurm-scheduler-host or
--dask-slurm-interface says otherwise.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from ..config import RunConfig
from ..worker import SUPERVISOR_MODULE
from ..worker.supervisor import sweep
from .dask_argv import dask_option_names
from .preflight import check_dask_cli
from .process_cluster import ProcessCluster
from .security import RunSecurity
from .spec import plan_local

PREFLIGHT_TIMEOUT = 60.0


class LocalProcessCluster(ProcessCluster):
    """Scheduler plus supervised ``dask worker`` processes on this machine."""

    @classmethod
    def plan(
        cls, config: RunConfig, cpus: int, cpus_source: str, mem_mb: int | None, host: str,
        security: RunSecurity,
    ) -> LocalProcessCluster:  # fmt: skip
        spec = plan_local(
            config, cpus, cpus_source, mem_mb, host, sys.executable, os.getpid(), security
        )
        cluster = cls(spec, config.startup_timeout, security)
        cluster.show_dashboard = config.dashboard
        cluster.dashboard_bind = config.dashboard_address
        return cluster

    def preflight(self) -> None:
        """Check the Dask CLI accepts every option, before starting anything."""
        check_dask_cli(
            sys.executable,
            dask_option_names(self.scheduler.argv),
            (*dask_option_names(self.workers[0].argv), "--name"),
            PREFLIGHT_TIMEOUT,
            worker_module=SUPERVISOR_MODULE,
        )

    def sweep(self, worker: str, keys: Sequence[str]) -> str | None:
        """The workers run on this machine: end the jobs' processes from here."""
        return f"the plugin ended {sweep(keys)} process(es) of them on this machine"

    def summary(self) -> list[str]:
        logs = self.spec.scheduler.log_path.parent
        return [f"Dask: {self.description}; logs in {logs}", *self.dashboard_lines()]
