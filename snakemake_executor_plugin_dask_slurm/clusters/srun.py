"""Inside a SLURM allocation: the scheduler here, workers on every node through srun.

Everything is decided before anything starts: the allocation (nodes, CPUs per node and
where that number came from, memory, GPUs), the layout (one srun step per distinct node
size), the scheduler's address (reachable from the nodes), and a preflight check that
this interpreter's ``dask scheduler``/``dask worker`` accept every option passed. Then the
shared :class:`~.cluster.ProcessCluster` lifecycle starts the scheduler and the steps,
waits for *every* expected worker while watching every step, and tears down in order.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import urlparse

from ..config import RunConfig
from ..errors import DaskSlurmError
from ..slurm.allocation import Allocation, read_allocation, with_node_memory
from ..slurm.argv import srun_step_command, sweep_step_command
from ..slurm.layout import NodeGroup, WorkerLayout, plan_layout
from ..slurm.run import (
    SlurmCommandError,
    find_slurm_commands,
    scontrol_hostnames,
    scontrol_job_state,
    scontrol_node_memory,
)
from ..slurm.run import run as slurm_run
from ..slurm.states import allocation_ended
from .base import ProcessCluster, dashboard_link, owner_environment
from .dask_argv import (
    SUPERVISOR_MODULE,
    dask_option_names,
    scheduler_command,
    supervised_worker_command,
)
from .local import (
    file_locking_env,
    record_dir,
    scheduler_options,
    supervisor_options,
    worker_options,
)
from .network import check_bindable, choose_scheduler_host
from .preflight import check_dask_cli
from .process import ManagedProcess

#: srun job-step name of the worker steps, as ``squeue -s`` shows it.
STEP_NAME = "dask-workers"
PREFLIGHT_TIMEOUT = 60.0
SCONTROL_TIMEOUT = 15.0
#: Asked only once the cluster broke, on Snakemake's thread: keep it short.
JOB_STATE_TIMEOUT = 5.0
#: Seconds for the srun step that ends a lost worker's jobs when its supervisor is gone.
SWEEP_TIMEOUT = 30.0

logger = logging.getLogger(__name__)


def node_of_worker(worker: str, nodes: Sequence[str]) -> str | None:
    """The node a worker named ``n3`` or ``n3-1`` (several a node) runs on."""
    if worker in nodes:
        return worker
    base = worker.rpartition("-")[0]
    return base if base in nodes else None


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


def step_log_name(index: int, group: NodeGroup) -> str:
    return f"workers-step{index}-{group.cpus}cpus.log"


class SrunCluster(ProcessCluster):
    """A scheduler on this host and one srun step of workers per node size."""

    def __init__(
        self,
        config: RunConfig,
        alloc: Allocation,
        layout: WorkerLayout,
        host: tuple[str | None, str],
        srun: str,
        log_dir: Path,
        scontrol: str | None = None,
    ):
        python = sys.executable
        scheduler_file = config.scheduler_file or log_dir / "scheduler.json"
        scheduler_argv = scheduler_command(
            python, scheduler_options(config, scheduler_file, host[0])
        )
        env = owner_environment() | file_locking_env(config.file_locking)
        steps, payloads = [], []
        for index, group in enumerate(layout.groups):
            opts = worker_options(
                config, scheduler_file, group.threads_per_worker, group_resources(group, alloc)
            )
            supervisor = supervisor_options(config, None, group.workers_per_node > 1)
            payload = supervised_worker_command(python, supervisor, opts)
            argv = srun_step_command(
                group, job_name=STEP_NAME, srun_args=config.srun_args, payload=payload, srun=srun
            )
            name = f"srun step for {','.join(group.nodes)}"
            steps.append(ManagedProcess(name, argv, log_dir / step_log_name(index, group), env))
            payloads.append(payload)
        scheduler = ManagedProcess(
            "Dask scheduler", scheduler_argv, log_dir / "scheduler.log", owner_environment()
        )
        super().__init__(
            scheduler,
            steps,
            scheduler_file,
            layout.total_workers,
            config.startup_timeout,
            record_dir(config),
            config.nanny,
        )
        self.alloc, self.layout, self.host, self.log_dir = alloc, layout, host, log_dir
        self.python, self.payloads, self.scontrol = python, payloads, scontrol
        self.srun = srun
        self.show_dashboard = config.dashboard
        self.description = (
            f"srun Dask cluster in SLURM job {alloc.job_id}: {layout.total_workers} "
            f"worker(s) on {len(alloc.nodes)} node(s) in {len(layout.groups)} srun step(s)"
        )

    @classmethod
    def from_environment(cls, config: RunConfig, log_dir: Path) -> SrunCluster:
        import dask.system

        env: Mapping[str, str] = os.environ
        commands = find_slurm_commands()
        nodelist = env.get("SLURM_JOB_NODELIST", "")
        hostnames = None
        if commands.scontrol and nodelist:
            hostnames = scontrol_hostnames(commands.scontrol, nodelist, SCONTROL_TIMEOUT)
        alloc = read_allocation(env, hostnames, dask.system.CPU_COUNT, os.cpu_count() or 1)
        if alloc.mem_mb is None and commands.scontrol:
            memory = scontrol_node_memory(commands.scontrol, alloc.nodes, SCONTROL_TIMEOUT)
            alloc = with_node_memory(alloc, memory)
        layout = plan_layout(alloc, config.workers)
        others = [node for node in alloc.nodes if node != alloc.this_node]
        host = choose_scheduler_host(
            config.interface,
            config.scheduler_host,
            others[0] if others else None,
            alloc.this_node_is_allocated,
        )
        check_bindable(host[0])
        cluster = cls(config, alloc, layout, host, commands.srun, log_dir, commands.scontrol)
        cluster.preflight()
        return cluster

    def preflight(self) -> None:
        """Check the Dask CLI accepts every option, before starting anything."""
        worker_opts = tuple(o for p in self.payloads for o in dask_option_names(p))
        check_dask_cli(
            self.python,
            dask_option_names(self.scheduler.argv),
            (*worker_opts, "--name"),
            PREFLIGHT_TIMEOUT,
            worker_module=SUPERVISOR_MODULE,
        )

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
        state = scontrol_job_state(self.scontrol, self.alloc.job_id, JOB_STATE_TIMEOUT)
        ended = allocation_ended(self.alloc.job_id, state) if state else None
        return f"{ended}, and its Dask workers with it" if ended else None

    def sweep(self, worker: str, keys: Sequence[str]) -> str | None:
        """End the processes of ``keys`` on ``worker``'s node with a one-task srun step."""
        node = node_of_worker(worker, self.alloc.nodes)
        if node is None:
            return None
        try:
            said = slurm_run(sweep_step_command(node, self.python, keys, self.srun), SWEEP_TIMEOUT)
        except SlurmCommandError as e:
            logger.warning("dask-slurm: ending the jobs' processes on %s failed: %s", node, e)
            return None
        return f"an srun step on {node} ended them ({said.strip()})"

    def worker_hint(self) -> str:
        return (
            "Common causes: the plugin or Dask is not installed in the same environment "
            f"on the nodes ({self.python} must work there); SLURM refused the step (more "
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
            f"memory per node: {alloc.mem_mb_per_node or 'not granted explicitly'} "
            f"({alloc.mem_source}); GPUs per node: {alloc.gpus_per_node or 0}",
            f"workers: {self.layout.describe()}",
            f"scheduler on {socket.gethostname()} at "
            f"{self.client.scheduler_info()['address'] if self.client else '?'} "
            f"({self.host[1]})",
            f"all {self.expected_workers} workers registered in {self.bringup_seconds or 0:.1f} s"
            f"; logs in {self.log_dir}",
        ]
        link = dashboard_link(self.client) if self.client and self.show_dashboard else None
        if link:
            lines.append(dashboard_hint(link))
        return lines


def dashboard_hint(link: str) -> str:
    """The dashboard address and the SSH tunnel that reaches it from a laptop."""
    url = urlparse(link)
    here = socket.gethostname()
    port = url.port or 8787
    return (
        f"Dask dashboard: {link} ; from your laptop: ssh -N -L {port}:{url.hostname}:{port} "
        f"{here} (through your site's login node if {here} is not reachable), then open "
        f"http://localhost:{port}{url.path}"
    )
