"""Inside a SLURM allocation: the scheduler here, workers on every node through srun.

Everything is decided before anything starts: the allocation (nodes, CPUs per node and
where that number came from, memory, GPUs), the layout (one srun step per distinct node
size), the scheduler's address (reachable from the nodes), and a preflight check that
this interpreter's ``dask scheduler``/``dask worker`` accept every option passed; the plan
itself is :func:`.spec.plan_srun`. Then the shared lifecycle
(:class:`.process_cluster.ProcessCluster`) starts the scheduler and the steps, waits for
*every* expected worker while watching every step, and tears down in order.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence

from ..config import RunConfig
from ..report.detail import detail
from ..slurm.allocation import Allocation
from ..slurm.layout import WorkerLayout, plan_layout
from ..slurm.run import (
    Slurm,
    end_worker_on_node,
    find_slurm_commands,
    node_of_worker,
    read_granted_allocation,
    scontrol_job_state,
    scontrol_time_left,
    sweep_node,
)
from ..slurm.states import allocation_ended
from ..slurm.walltime import allocation_end
from ..worker.clock import AllocationEnd, plan_runway, scaled_margins
from ..worker.supervisor import Swept
from .base import PlannedClock
from .network import check_bindable, choose_scheduler_host
from .process_cluster import ProcessCluster
from .recipe import LandingPoint
from .security import RunSecurity
from .spec import plan_srun

SCONTROL_TIMEOUT = 15.0


def _megabytes(mb: int | None) -> str:
    return f"{mb} MB" if mb else "not granted explicitly"


def run_end(
    config: RunConfig, env: Mapping[str, str], seconds_left: float | None, now: float
) -> AllocationEnd | None:
    """The allocation's end and the margins the run keeps before it (None: no time limit
    SLURM could tell, or --dask-slurm-landing-margin 0)."""
    if config.landing_margin <= 0:
        return None
    found = allocation_end(env, seconds_left, now)
    if found is None:
        return None
    margin, safety = scaled_margins(found[0], now, config.landing_margin, config.runtime_margin)
    return AllocationEnd(found[0], margin, safety, found[1])


#: Asked only once the cluster broke, on Snakemake's thread: keep it short. Up to
#: JOB_STATE_TRIES questions: the controller is busy ending the allocation just then.
JOB_STATE_TIMEOUT = 5.0
JOB_STATE_TRIES = 3

logger = logging.getLogger(__name__)


class SrunCluster(ProcessCluster):
    """A scheduler on this host and one srun step of workers per node size."""

    @classmethod
    def from_environment(
        cls,
        config: RunConfig,
        make_security: Callable[[float | None], RunSecurity],
        worker_job_limit: float | None = None,
    ) -> SrunCluster:
        """Read the allocation, plan the workers (:func:`.spec.plan_srun`), check the
        scheduler's address and the Dask CLI: everything before anything starts.
        ``make_security`` gets the allocation's seconds left (credentials live no longer
        than it can). The workers land where the run does (its end, less the landing
        margin), and with worker jobs of ``worker_job_limit`` seconds they advertise the
        run's runway up to there (:mod:`..worker.clock`)."""
        import dask.system

        env: Mapping[str, str] = os.environ
        commands = find_slurm_commands()
        alloc = read_granted_allocation(
            env, commands.scontrol, dask.system.CPU_COUNT, os.cpu_count() or 1, SCONTROL_TIMEOUT
        )
        layout = plan_layout(alloc, config.workers)
        others = [node for node in alloc.nodes if node != alloc.this_node]
        host = choose_scheduler_host(
            config.interface,
            config.scheduler_host,
            others[0] if others else None,
            alloc.this_node_is_allocated,
        )
        check_bindable(host[0])
        seconds_left = None
        if commands.scontrol:
            seconds_left = scontrol_time_left(commands.scontrol, alloc.job_id, SCONTROL_TIMEOUT)
        security = make_security(seconds_left)
        now = time.time()
        end = run_end(config, env, seconds_left, now)
        runway = None
        if config.growth is not None:
            left = end.landing_at - now if end is not None else None
            runway = plan_runway(
                worker_job_limit, left, True, config.landing_margin, config.runtime_margin
            )
        landing = LandingPoint(end.landing_at, now) if end is not None else None
        spec = plan_srun(
            config, alloc, layout, host[0], commands.srun, sys.executable, os.getpid(), security,
            landing, runway.step if runway is not None else None,
        )  # fmt: skip
        cluster = cls(spec, config.startup_timeout, security)
        cluster.alloc, cluster.layout, cluster.host = alloc, layout, host
        cluster.srun, cluster.scontrol = commands.srun, commands.scontrol
        if end is not None or runway is not None:  # the workers' landing point and runway
            cluster.clock = PlannedClock(end, runway)
        cluster.show_dashboard = config.dashboard
        cluster.dashboard_bind = config.dashboard_address
        return cluster

    alloc: Allocation
    layout: WorkerLayout
    host: tuple[str | None, str]
    srun: str
    scontrol: str | None = None

    def problem(self) -> str | None:
        """What broke; first whether SLURM ended the allocation, the usual cause.

        A cancelled or timed-out allocation shows up here as a step that ended or as
        workers missing, whichever the plugin sees first; SLURM's job state says which
        it really was, so the message does not depend on that race.
        """
        seen = super().problem()
        if seen is None:
            return None
        ended = self.allocation_problem()
        return f"{ended}. What the plugin saw: {seen}" if ended else seen

    def allocation_problem(self) -> str | None:
        if self.scontrol is None:
            return None
        job_id = self.alloc.job_id
        state = scontrol_job_state(self.scontrol, job_id, JOB_STATE_TIMEOUT, JOB_STATE_TRIES)
        ended = allocation_ended(job_id, state) if state else None
        if ended is None:  # the message says only what the plugin saw: say why here
            tries = f"gave no answer in {JOB_STATE_TRIES} tries"
            said = f"says it is {state[0]}" if state else tries
            detail.info("SLURM allocation %s: 'scontrol show job %s' %s", job_id, job_id, said)
        return f"{ended}. Its Dask workers ended with it" if ended else None

    def sweep(self, worker: str, keys: Sequence[str]) -> Swept | None:
        """End the processes of ``keys`` on ``worker``'s node with a one-task srun step."""
        node = node_of_worker(worker, self.alloc.nodes)
        return sweep_node(Slurm(), self.srun, sys.executable, node, keys) if node else None

    def end_worker(self, name: str, pid: int | None) -> str | None:
        """End a silent worker on its node with a one-task srun step."""
        node = node_of_worker(name, self.alloc.nodes)
        if node is None or pid is None:
            return None
        return end_worker_on_node(Slurm(), self.srun, sys.executable, node, pid)

    def worker_hint(self) -> str:
        return (
            "Common causes: the plugin or Dask is not installed in the same environment "
            f"on the nodes ({sys.executable} must work there); SLURM refused the step (more "
            "CPUs or memory than granted: see the step log); the nodes cannot reach the "
            f"scheduler at {self.host[0] or 'its default address'} (name a reachable "
            "interface with --dask-slurm-interface, e.g. ib0, or a host with "
            "--dask-slurm-scheduler-host)."
        )

    def summary(self) -> list[str]:
        alloc = self.alloc
        lines = [
            f"allocation {alloc.job_id}: nodes {','.join(alloc.nodes)}; CPUs per node "
            f"{','.join(map(str, alloc.cpus))} (from {alloc.cpus_source})",
            f"memory per node: {_megabytes(alloc.mem_mb_per_node)} "
            f"({alloc.mem_source}); GPUs per node: {alloc.gpus_per_node or 0}",
            f"workers: {self.layout.describe()}",
            f"scheduler on {socket.gethostname()} at "
            f"{self.client.scheduler_info()['address'] if self.client else '?'} "
            f"({self.host[1]})",
            f"all {self.expected_workers} workers registered in {self.bringup_seconds or 0:.1f} s"
            f"; logs in {self.spec.scheduler.log_path.parent}",
        ]
        return lines + self.dashboard_lines()
