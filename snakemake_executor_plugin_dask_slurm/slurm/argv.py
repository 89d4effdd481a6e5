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


def sweep_step_command(
    node: str, python: str, args: Sequence[str], srun: str, job_id: str | None = None
) -> list[str]:
    """One task on ``node`` that runs the supervisor with ``args``: ``--sweep KEY...`` ends
    every process of those jobs still running there (see :func:`..worker.supervisor.sweep`:
    for a worker that died with its supervisor), ``--end-worker PID`` a silent worker.
    ``job_id``: a step of that job (a worker job's node), not of this allocation."""
    return [
        srun,
        *([f"--jobid={job_id}"] if job_id else []),
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
        *args,
    ]


def sbatch_command(
    script: str,
    *,
    job_name: str,
    output: str,
    nodes: int,
    cpus_per_node: int | None,
    time_limit: str | None,
    partition: str | None,
    account: str | None,
    sbatch_args: Sequence[str],
    test_only: bool = False,
    sbatch: str = "sbatch",
) -> list[str]:
    """``sbatch`` of one worker job running ``script`` (a file: never ``--wrap``, no shell).

    Whole nodes (``--exclusive``) unless ``cpus_per_node`` is given (one task per node
    with that many CPUs); ``--parsable`` prints the job id; ``--test-only`` asks SLURM
    whether it would accept the job, submitting nothing. ``sbatch_args`` (the user's)
    come last.
    """
    size = (
        ["--ntasks-per-node=1", f"--cpus-per-task={cpus_per_node}"]
        if cpus_per_node
        else ["--exclusive"]
    )
    return [
        sbatch,
        "--parsable",
        *(["--test-only"] if test_only else []),
        f"--job-name={job_name}",
        f"--output={output}",
        f"--nodes={nodes}",
        *size,
        *([f"--time={time_limit}"] if time_limit else []),
        *([f"--partition={partition}"] if partition else []),
        *([f"--account={account}"] if account else []),
        *sbatch_args,
        script,
    ]


def squeue_command(job_ids: Sequence[str], squeue: str = "squeue") -> list[str]:
    """The state, node list and time left of ``job_ids``, one ``ID|STATE|NODES|LEFT``
    line each, ended jobs included while SLURM still lists them (jobs it no longer lists
    are absent). LEFT is the time limit less the time used (SLURM's duration format)."""
    return [
        squeue,
        "--noheader",
        f"--jobs={','.join(job_ids)}",
        "--states=all",
        "--format=%i|%T|%N|%L",
    ]


def scancel_command(job_ids: Sequence[str], scancel: str = "scancel") -> list[str]:
    """One ``scancel`` for every job in ``job_ids``."""
    return [scancel, *job_ids]


def sinfo_command(partition: str | None, sinfo: str = "sinfo") -> list[str]:
    """One ``NODE|CPUS|STATE`` line per node of ``partition`` (SLURM's default: all)."""
    return [
        sinfo,
        "--noheader",
        "--Node",
        *([f"--partition={partition}"] if partition else []),
        "--format=%N|%c|%t",
    ]


def partition_limits_command(partition: str | None, sinfo: str = "sinfo") -> list[str]:
    """One ``PARTITION|MAXTIME|DEFAULTTIME`` line per partition (the default one marked
    ``*``), or of ``partition``."""
    return [
        sinfo,
        "--noheader",
        *([f"--partition={partition}"] if partition else []),
        "--format=%P|%l|%L",
    ]
