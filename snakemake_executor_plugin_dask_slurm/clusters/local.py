"""The embedded default: a scheduler and supervised worker processes on this machine.

Same lifecycle as the srun source (:class:`.process_cluster.ProcessCluster`), with the
workers started directly (each under the plugin's supervisor) instead of through srun; the
plan is :func:`.spec.plan_local`. The scheduler runs as its own process rather than inside
Snakemake's, so its work never competes with Snakemake's scheduling thread for the
interpreter lock. It listens on loopback unless --dask-slurm-scheduler-host or
--dask-slurm-interface says otherwise.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..config import RunConfig
from ..worker.supervisor import Swept, end_worker, sweep
from .process_cluster import ProcessCluster
from .security import RunSecurity
from .spec import plan_local

if TYPE_CHECKING:
    from .early import EarlyWorkers


class LocalProcessCluster(ProcessCluster):
    """Scheduler plus supervised ``dask worker`` processes on this machine."""

    @classmethod
    def plan(
        cls, config: RunConfig, cpus: int, cpus_source: str, mem_mb: int | None, host: str,
        security: RunSecurity, early: EarlyWorkers | None = None,
    ) -> LocalProcessCluster:  # fmt: skip
        spec = plan_local(
            config, cpus, cpus_source, mem_mb, host, sys.executable, os.getpid(), security
        )
        cluster = cls(spec, config.startup_timeout, security, early)
        cluster.show_dashboard = config.dashboard
        cluster.dashboard_bind = config.dashboard_address
        # Outside SLURM the scheduler runs where the user runs Snakemake: no tunnel to
        # offer. Inside an allocation (a batch script) it is on a node like srun mode's.
        cluster.dashboard_tunnel = "SLURM_JOB_ID" in os.environ
        return cluster

    def sweep(self, worker: str, keys: Sequence[str]) -> Swept | None:
        """The workers run on this machine: end the jobs' processes from here."""
        killed, running = sweep(keys)
        return Swept(
            f"the plugin ended {killed} process(es) of them on this machine", tuple(running)
        )

    def end_worker(self, name: str, pid: int | None) -> str | None:
        """The workers run on this machine: end a silent one from here."""
        if pid is None:
            return None
        return f"worker {name} (pid {pid}) {end_worker(pid)} on this machine"

    def summary(self) -> list[str]:
        logs = self.spec.scheduler.log_path.parent
        # Its description was said as it started (run.py): said once.
        return [f"local Dask cluster up; logs in {logs}", *self.dashboard_lines()]
