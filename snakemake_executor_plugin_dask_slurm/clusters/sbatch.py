"""From a login node, no allocation: the scheduler here, every worker from worker jobs.

What users of the SLURM executor plugin do today, minus one ``sbatch`` per rule: the
scheduler runs next to Snakemake (it must be reachable from the compute nodes: the
address on the route to one of the partition's nodes, or what --dask-slurm-interface /
--dask-slurm-scheduler-host say), and :class:`.worker_jobs.pool.WorkerJobs` submits the worker
jobs as jobs wait. Only asked for (``--dask-slurm-cluster sbatch``): ``auto`` never picks
it, because it queues batch jobs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from ..config import RunConfig
from ..errors import DaskSlurmError
from ..slurm.argv import sinfo_command
from ..slurm.run import ask, parse_sinfo
from .network import check_bindable, choose_scheduler_host
from .process_cluster import ProcessCluster
from .security import RunSecurity
from .spec import plan_scheduler_only

SINFO_TIMEOUT = 30.0


class SbatchCluster(ProcessCluster):
    """The scheduler only; its workers are the worker jobs'."""

    host: tuple[str | None, str]

    @classmethod
    def from_environment(
        cls, config: RunConfig, make_security: Callable[[float | None], RunSecurity]
    ) -> SbatchCluster:
        # Any node up will do to find the route (the worker jobs' partition is checked
        # with SLURM itself, by sbatch --test-only, next).
        done = ask(sinfo_command(None), SINFO_TIMEOUT)
        nodes = sorted(parse_sinfo(done.stdout)) if done and done.returncode == 0 else []
        if not nodes and not (config.interface or config.scheduler_host):
            raise DaskSlurmError(
                "--dask-slurm-cluster sbatch: sinfo listed no node that is up, so the plugin "
                "cannot tell which address the nodes reach this host at. Check 'sinfo', or "
                "give the address with --dask-slurm-scheduler-host / --dask-slurm-interface."
            )
        host = choose_scheduler_host(
            config.interface, config.scheduler_host, nodes[0] if nodes else None, False
        )
        check_bindable(host[0])
        security = make_security(None)
        spec = plan_scheduler_only(config, host[0], sys.executable, os.getpid(), security)
        cluster = cls(spec, config.startup_timeout, security)
        cluster.host = host
        cluster.show_dashboard = config.dashboard
        cluster.dashboard_bind = config.dashboard_address
        return cluster

    def summary(self) -> list[str]:
        address = self.client.scheduler_info(n_workers=0)["address"] if self.client else "?"
        return [
            f"Dask scheduler on this host at {address} ({self.host[1]}); every worker "
            f"comes from worker jobs; logs in {self.spec.scheduler.log_path.parent}",
            *self.dashboard_lines(),
        ]
