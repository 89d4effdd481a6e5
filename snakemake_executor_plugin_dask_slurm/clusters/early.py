"""Local mode: the workers started before the cluster is planned.

A run whose jobs go the warm way waits, before its first job, for each worker's warm
process to import Snakemake and parse the workflow (docs/benchmarks.md: ~0.6 s of import
on a busy 2-core machine, then the parse). Planned first, a local worker starts ~0.3 s
after the executor's start (the plan needs the CPUs and memory, which Dask's imports tell),
while Snakemake's own process has one core busy and the other idle. So when a run has a
job command to prime (:meth:`..dispatch.job_commands.JobCommandBuilder.prime_request`),
:meth:`EarlyWorkers.start` starts each local worker's supervisor at once, without its Dask
options: the supervisor starts the worker (``worker/dask_main.py --args-on-stdin``), which
starts its warm process, then waits for its options on its stdin. When the plan is made,
:meth:`EarlyWorkers.adopt` sends each worker the options the plan gives it, if the
worker's command and environment are the ones the plan would have started; otherwise it
stops the early worker and the plan's is started as before (a changed environment, a
layout error). Nothing changes for the processes' lifecycle: the chain is the one every
local worker has (supervisor, worker, warm process; the supervisor the subreaper of all
of them), each in its own session, stopped by the cluster's close; an early worker whose
run ends before the launch is stopped by :meth:`EarlyWorkers.close`, and one whose
Snakemake is killed reads the end of its stdin and exits, and its supervisor with it.

Only for one-process workers (no ``--dask-slurm-nanny``, whose restarts would need the
options again) and only local mode: an srun step's workers start on their nodes.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from ..config import RunConfig
from ..report.detail import detail
from .dask_argv import deferred_options
from .process import ManagedProcess, Status
from .security import RunSecurity
from .spec import early_local_workers


def worth_starting_early(config: RunConfig, prime: Mapping[str, object] | None) -> bool:
    """Local mode with a job command to prime and one-process workers."""
    return config.cluster == "local" and prime is not None and not config.nanny


class EarlyWorkers:
    """Local workers started before the plan, by their log path (one per worker)."""

    def __init__(self, security: RunSecurity):
        self.security = security
        self.processes: dict[Path, ManagedProcess] = {}
        #: Why a worker was not adopted (for the log), by its name.
        self.not_adopted: dict[str, str] = {}

    @classmethod
    def start(
        cls, config: RunConfig, security: RunSecurity, worker_env: Mapping[str, str]
    ) -> EarlyWorkers:
        """Start the local workers of ``config`` (their environment: this process's, the
        plan's, ``worker_env``), waiting for their Dask options."""
        early = cls(security)
        try:
            for spec in early_local_workers(config, sys.executable, os.getpid(), security):
                env = dict(os.environ) | dict(spec.env) | dict(worker_env)
                process = ManagedProcess(spec.name, spec.argv, spec.log_path, env, stdin_pipe=True)
                early.processes[spec.log_path] = process
                process.start()
        except BaseException:
            early.close()
            raise
        return early

    def adopt(self, worker: ManagedProcess) -> ManagedProcess | None:
        """The early process that is ``worker`` (same log, command and environment), sent
        its Dask options: it runs on from here. None if there is none, or it differs (it
        is stopped then, and ``worker`` is to be started as usual)."""
        early = self.processes.pop(worker.log_path, None)
        if early is None:
            return None
        command, options = deferred_options(worker.argv)
        if list(early.argv) != command:
            why = "its command is not the planned one"
        elif (mine := dict(early.env or {})) != (planned := dict(worker.env or {})):
            changed = sorted(
                k for k in mine.keys() | planned.keys() if mine.get(k) != planned.get(k)
            )
            why = f"its environment is not the planned one ({', '.join(changed[:5])})"
        elif early.status is not Status.running:
            why = f"it {early.exit_description()} before the plan"
        elif not early.hand_over((json.dumps(options) + "\n").encode()):
            why = "it did not take its options (its stdin closed)"
        else:
            detail.info("%s: started before the plan, its options sent at the launch", early.name)
            return early
        self.not_adopted[worker.name] = why
        detail.info("%s: started before the plan, not used: %s; started anew", early.name, why)
        early.close()
        return None

    def close(self) -> None:
        """Stop the early workers not adopted."""
        while self.processes:
            _, process = self.processes.popitem()
            process.close()
