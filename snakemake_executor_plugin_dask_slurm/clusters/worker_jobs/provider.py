"""Worker jobs' SLURM side, in the shape of Parsl's ``ExecutionProvider``:
:meth:`SlurmProvider.prepare` once, then :meth:`SlurmProvider.submit` (``sbatch``),
:meth:`SlurmProvider.status` (one ``squeue`` for every job) and
:meth:`SlurmProvider.cancel` (one ``scancel``), plus the one-task srun steps in a worker
job that end a dead worker's jobs or a silent worker. Every SLURM command of the worker
jobs goes through here and :class:`...slurm.run.Slurm`, so a test runs them against a
scripted SLURM (tests/slurm_script.py); when to call them is :mod:`.pool`'s.

- **Before anything starts** (:meth:`SlurmProvider.prepare`): the partition's nodes and
  their CPUs (``sinfo``: what one worker job brings, so that jobs larger than the first
  allocation's nodes are not refused), the recipe and the two-line Python batch script
  written into the run directory, and ``sbatch --test-only`` with the very options of the
  real submissions: a wrong partition, account or size is an error at start-up that names
  the option.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ...config import GrowthConfig
from ...errors import DaskSlurmError
from ...report.hints import blame_setting
from ...slurm.argv import sbatch_command, scancel_command, sinfo_command, squeue_command
from ...slurm.run import (
    Queued,
    Slurm,
    SlurmCommandError,
    end_worker_on_node,
    find_commands,
    parse_sinfo,
    parse_squeue,
    sweep_node,
)
from ...slurm.states import GONE
from ...worker.supervisor import Swept
from ..recipe import WorkerRecipe

logger = logging.getLogger(__name__)

SLURM_TIMEOUT = 30.0
SCRIPT_NAME = "worker-job.py"
RECIPE_NAME = "recipe.json"


@dataclass(frozen=True)
class GrowthCommands:
    sbatch: str
    squeue: str
    scancel: str
    sinfo: str
    srun: str

    @classmethod
    def find(cls) -> GrowthCommands:
        found = find_commands(
            [field.name for field in dataclasses.fields(cls)],
            "Worker jobs are submitted, watched and cancelled with them (or run without "
            "--dask-slurm-worker-jobs).",
        )
        return cls(**found)


def submission_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment sbatch runs in: without this allocation's SLURM_* variables
    (SLURM_CONF excepted), which sbatch would otherwise pass into the worker job and
    which would describe the wrong allocation there."""
    return {k: v for k, v in env.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}


def batch_script(python: str, recipe_path: Path) -> str:
    """The worker job's batch script: Python, no shell."""
    return (
        f"#!{python}\n"
        "# A dask-slurm worker job: Dask workers on this job's nodes join a running workflow.\n"
        "from snakemake_executor_plugin_dask_slurm.clusters.worker_jobs.in_job import main\n"
        f"raise SystemExit(main([{str(recipe_path)!r}]))\n"
    )


def job_id_of(said: str) -> str | None:
    """The job id ``sbatch --parsable`` printed (``1234`` or ``1234;cluster``), if any."""
    job_id = said.strip().splitlines()[-1].split(";")[0].strip() if said.strip() else ""
    return job_id if job_id.isdigit() else None


class SlurmProvider:
    """The run's worker jobs as SLURM sees them: ``config``'s options, named ``name`` in
    SLURM's queue, starting workers from ``recipe``."""

    def __init__(
        self,
        config: GrowthConfig,
        recipe: WorkerRecipe,
        run_dir: Path,
        name: str,
        commands: GrowthCommands,
        slurm: Slurm | None = None,
    ):
        self.config = config
        self.recipe = recipe
        self.dir = run_dir / "worker-jobs"
        self.logs = Path(recipe.log_dir)
        self.name = name
        self.commands = commands
        self.slurm = slurm or Slurm()
        #: The partition's nodes that are up, and their CPUs (sinfo, at :meth:`prepare`).
        self.node_cpus: dict[str, int] = {}

    def prepare(self) -> None:
        """Nodes of the partition, the batch script, and SLURM's dry run of a submission."""
        self.dir.mkdir(parents=True, exist_ok=True)
        recipe_path = self.dir / RECIPE_NAME
        recipe_path.write_text(self.recipe.to_json())
        script = self.dir / SCRIPT_NAME
        script.write_text(batch_script(self.recipe.python, recipe_path))
        script.chmod(0o700)
        try:
            said = self._sbatch(test_only=True)
        except SlurmCommandError as e:
            blame = blame_setting(e.said, {"--dask-slurm-sbatch-args": self.config.sbatch_args})
            if blame:
                raise DaskSlurmError(
                    f"sbatch refused the worker jobs (checked with sbatch --test-only before "
                    f"submitting anything): {e.said.strip()}. {blame}"
                ) from None
            raise DaskSlurmError(
                f"SLURM would not accept the worker jobs (checked with sbatch --test-only "
                f"before submitting anything): {e.said.strip() or e.problem}. The options "
                f"were: {self.options_text()}. Fix the one SLURM names (a partition or "
                "account that does not exist or that you may not use, more nodes or CPUs "
                "than a node or the partition has, a time limit above the partition's), "
                f"{self.config.way_out}."
            ) from None
        logger.debug("sbatch --test-only said: %s", said)
        listed = self.slurm.run(
            sinfo_command(self.config.partition, self.commands.sinfo), SLURM_TIMEOUT
        )
        self.node_cpus = parse_sinfo(listed)
        if not self.node_cpus:
            where = f"partition {self.config.partition}" if self.config.partition else "SLURM"
            raise DaskSlurmError(
                f"Worker jobs: {where} lists no node that is up (sinfo). Name a partition "
                "with nodes in service with --dask-slurm-worker-job-partition."
            )

    def options_text(self) -> str:
        c = self.config
        parts = [
            f"--dask-slurm-worker-job-nodes {c.nodes}",
            f"--dask-slurm-worker-job-cpus {c.cpus_per_node}"
            if c.cpus_per_node
            else "whole nodes (--exclusive)",
        ]
        if c.partition:
            parts.append(f"--dask-slurm-worker-job-partition {c.partition}")
        if c.account:
            parts.append(f"--dask-slurm-worker-job-account {c.account}")
        if c.time_limit:
            parts.append(f"--dask-slurm-worker-job-time {c.time_limit}")
        if c.sbatch_args:
            parts.append(f"--dask-slurm-sbatch-args {shlex.join(c.sbatch_args)!r}")
        return ", ".join(parts)

    def offers(self) -> list[dict[str, float]]:
        """What one worker of a worker job offers (for admission): its CPUs."""
        if self.config.cpus_per_node:
            return [{"cpus": float(self.config.cpus_per_node)}]
        return [{"cpus": float(c)} for c in sorted(set(self.node_cpus.values()))]

    @property
    def cpus_per_job(self) -> float:
        """What one worker job brings, counted low (the smallest nodes)."""
        per_node = self.config.cpus_per_node or min(self.node_cpus.values(), default=1)
        return float(per_node * self.config.nodes)

    def log_of(self, job_id: str) -> str:
        """Where worker job ``job_id``'s batch script writes."""
        return f"{self.logs}/worker-job-{job_id}.out"

    # -- Parsl's ExecutionProvider: submit, status, cancel --------------------------------

    def submit(self) -> tuple[str | None, str]:
        """Submit one worker job: its id (None: sbatch printed none) and what sbatch said.
        Raises :class:`...slurm.run.SlurmCommandError` if SLURM refused it."""
        said = self._sbatch()
        return job_id_of(said), said

    def status(self, job_ids: Sequence[str]) -> dict[str, Queued] | None:
        """Each job's state, nodes and time left, in one squeue (a job squeue no longer
        lists is ``GONE``); None if the controller did not answer (ask again later)."""
        done = self.slurm.ask(squeue_command(job_ids, self.commands.squeue), SLURM_TIMEOUT)
        if done is None or (done.returncode != 0 and "Invalid job id" not in done.stderr):
            return None
        states = parse_squeue(done.stdout)
        return {job_id: states.get(job_id, Queued(GONE, "")) for job_id in job_ids}

    def cancel(self, job_ids: Sequence[str]) -> None:
        """Cancel these worker jobs, in one scancel (best effort)."""
        self.slurm.ask(scancel_command(list(job_ids), self.commands.scancel), SLURM_TIMEOUT)

    # -- a step in a worker job, on one of its nodes ----------------------------------------

    def sweep(self, job_id: str, node: str, keys: list[str]) -> Swept | None:
        """End the jobs' processes left on ``node`` of worker job ``job_id``."""
        return sweep_node(self.slurm, self.commands.srun, sys.executable, node, keys, job_id)

    def end_worker(self, job_id: str, node: str, pid: int) -> str | None:
        """End the silent worker ``pid`` on ``node`` of worker job ``job_id``."""
        srun = self.commands.srun
        return end_worker_on_node(self.slurm, srun, sys.executable, node, pid, job_id)

    def _sbatch(self, test_only: bool = False) -> str:
        argv = sbatch_command(
            str(self.dir / SCRIPT_NAME),
            job_name=self.name,
            output=str(self.logs / "worker-job-%j.out"),
            nodes=self.config.nodes,
            cpus_per_node=self.config.cpus_per_node,
            time_limit=self.config.time_limit,
            partition=self.config.partition,
            account=self.config.account,
            sbatch_args=self.config.sbatch_args,
            test_only=test_only,
            sbatch=self.commands.sbatch,
        )
        self.logs.mkdir(parents=True, exist_ok=True)
        return self.slurm.run(
            argv, SLURM_TIMEOUT, env=submission_env(os.environ), cwd=str(self.dir)
        )
