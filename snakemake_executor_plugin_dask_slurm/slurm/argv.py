"""Argument lists for the SLURM commands the plugin runs (pure): one builder each.

Nothing here runs anything; :mod:`.run` does.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..worker import SUPERVISOR_MODULE
from .layout import NodeGroup


def srun_step_command(
    group: NodeGroup,
    *,
    job_name: str,
    srun_args: Sequence[str],
    payload: Sequence[str],
    srun: str = "srun",
) -> list[str]:
    """The ``srun`` step that starts one task (one ``payload``, one worker) per worker on
    each node of ``group``.

    - ``--cpus-per-task`` is each worker's share of what its node was granted (the whole
      grant with one worker per node): never more in all (SLURM refuses it).
    - ``--mem=0``: for a step, zero means all the job's memory on each node, whatever
      SLURM_MEM_PER_* the job's environment would otherwise pass to srun.
    - ``--overlap`` lets the step share CPUs, memory and GPUs with other steps, so a rule
      can still start its own ``srun`` inside the allocation while the workers run.
    - ``--kill-on-bad-exit=0``: one node's worker failing must not take down the healthy
      workers on the other nodes of the step, whatever the site's KillOnBadExit says.
    - ``--input=none``: a backgrounded srun would otherwise read the terminal and be
      stopped by the shell (SIGTTIN) in an interactive ``salloc``.
    - ``--export=ALL``: an ``sbatch --export=NONE`` job passes SLURM_EXPORT_ENV=NONE to
      its steps, which would start the workers without the plugin's environment.

    ``srun_args`` (the user's) come after ours, so theirs win where srun lets the last
    one win.
    """
    count = len(group.nodes)
    per_node = group.workers_per_node
    return [
        srun,
        f"--nodes={count}",
        f"--ntasks={count * per_node}",
        f"--ntasks-per-node={per_node}",
        f"--nodelist={','.join(group.nodes)}",
        f"--cpus-per-task={group.threads_per_worker}",
        "--mem=0",
        "--overlap",
        "--kill-on-bad-exit=0",
        "--input=none",
        "--export=ALL",
        f"--job-name={job_name}",
        *srun_args,
        *payload,
    ]


def sweep_step_command(node: str, python: str, keys: Sequence[str], srun: str) -> list[str]:
    """One task on ``node`` that ends every process of the jobs ``keys`` still running
    there (see :func:`.supervisor.sweep`): for a worker that died with its supervisor."""
    return [
        srun,
        "--overlap",
        "--nodes=1",
        "--ntasks=1",
        f"--nodelist={node}",
        "--cpus-per-task=1",
        "--input=none",
        "--export=ALL",
        "--job-name=dask-slurm-sweep",
        python,
        "-m",
        SUPERVISOR_MODULE,
        "--sweep",
        *keys,
    ]
