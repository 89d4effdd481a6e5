"""What a worker job runs on its first node: the run's workers on every node of the job.

A worker job is an allocation like the one the run started in, so it is handled the same
way: what SLURM granted each node (:func:`...slurm.allocation.read_allocation`), one worker per
node with one thread per CPU (:func:`...slurm.layout.plan_layout`), one srun step per distinct
node size (:func:`..spec.plan_worker_steps`) — the very functions of the srun mode. The
workers are named ``j<job id>-<node>``, join the run's scheduler through its scheduler
file with the run's credentials (paths in the recipe), and exit when the scheduler closes
them (idle retirement, the end of the run) or is gone (Dask's death timeout); the job
ends when its steps have. ``scancel`` stops the steps, whose supervisors end the jobs'
processes and record it, so the plugin runs those jobs again elsewhere.

The batch script is a two-line Python file that calls :func:`main` with the recipe's
path (no shell anywhere)::

    python -m snakemake_executor_plugin_dask_slurm.clusters.worker_jobs.in_job RECIPE.json
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..recipe import LandingPoint, WorkerRecipe

#: Seconds scontrol gets to expand the job's node list or tell its nodes' memory.
SCONTROL_TIMEOUT = 15.0


def say(line: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} dask-slurm worker job: {line}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    import dask.system

    from ...slurm.layout import plan_layout
    from ...slurm.run import find_slurm_commands, read_granted_allocation
    from ..recipe import WorkerRecipe
    from ..spec import plan_worker_steps

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        say(f"usage: python -m {__name__} RECIPE")
        return 2
    recipe = WorkerRecipe.from_json(Path(args[0]).read_text())
    env = os.environ
    job_id = env.get("SLURM_JOB_ID", "?")
    if not Path(recipe.scheduler_file).exists():
        # The run is over (its scheduler removes the file when it exits), e.g. a worker
        # job that waited in the queue past a Snakemake killed outright: nothing to join.
        say(f"job {job_id}: no scheduler file {recipe.scheduler_file}: the run has ended")
        return 0
    commands = find_slurm_commands()
    alloc = read_granted_allocation(
        env, commands.scontrol, dask.system.CPU_COUNT, os.cpu_count() or 1, SCONTROL_TIMEOUT
    )
    layout = plan_layout(alloc, None)
    landing = own_landing(recipe, env, commands.scontrol, job_id)
    prefix = f"worker-job-{job_id}-"
    steps = plan_worker_steps(recipe, alloc, layout, commands.srun, prefix, landing)
    say(
        f"job {job_id}: nodes {','.join(alloc.nodes)}, CPUs {','.join(map(str, alloc.cpus))} "
        f"({alloc.cpus_source}); workers: {layout.describe()}"
    )
    procs: list[subprocess.Popen[bytes]] = []

    def forward(signum: int, frame: object) -> None:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(sig, forward)
    for step in steps:
        child_env = dict(env) | dict(step.env)
        step.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(step.log_path, "ab") as log:
            procs.append(
                subprocess.Popen(
                    list(step.argv),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=child_env,
                )
            )
        say(f"started {step.name} (log: {step.log_path})")
    codes = [proc.wait() for proc in procs]
    say(f"every worker step ended (exit codes {', '.join(map(str, codes))})")
    return 0 if all(code == 0 for code in codes) else 1


def own_landing(
    recipe: WorkerRecipe, env: Mapping[str, str], scontrol: str | None, job_id: str
) -> LandingPoint | None:
    """This job's landing point, from its end (``SLURM_JOB_END_TIME``, else scontrol): its
    workers start no job that cannot finish by then, and advertise the run's runway up to
    it. None when the run lands no worker job (no margin), or SLURM tells no end."""
    from ...slurm.run import scontrol_time_left
    from ...slurm.walltime import allocation_end
    from ..recipe import LandingPoint

    if recipe.landing_margin <= 0:
        return None
    now = time.time()
    left = scontrol_time_left(scontrol, job_id, SCONTROL_TIMEOUT) if scontrol else None
    found = allocation_end(env, left, now)
    if found is None:
        say(f"job {job_id}: SLURM tells no time limit; its workers do not land by themselves")
        return None
    landing = LandingPoint(found[0] - recipe.landing_margin, now)
    say(
        f"job {job_id}: ends at {time.strftime('%H:%M:%S', time.localtime(found[0]))} (from "
        f"{found[1]}); its workers land {recipe.landing_margin:.0f} s before, at "
        f"{time.strftime('%H:%M:%S', time.localtime(landing.at))}: no job starts there "
        "that cannot finish by then"
    )
    return landing


if __name__ == "__main__":
    raise SystemExit(main())
