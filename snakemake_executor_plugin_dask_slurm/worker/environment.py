"""The environment a job's commands see on a worker (standard library only).

Runs on the nodes: the supervisor starts each worker with it (see :mod:`.supervisor`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Mapping

#: What a rule's commands keep of SLURM's environment: the allocation's identity, as an
#: sbatch script sees it. Everything else SLURM sets describes the workers' own srun step.
JOB_LEVEL_VARIABLES = frozenset(
    {
        "SLURM_CLUSTER_NAME",
        "SLURM_CONF",
        "SLURM_JOB_ACCOUNT",
        "SLURM_JOB_CPUS_PER_NODE",
        "SLURM_JOB_GPUS",
        "SLURM_JOB_ID",
        "SLURM_JOB_NAME",
        "SLURM_JOB_NODELIST",
        "SLURM_JOB_NUM_NODES",
        "SLURM_JOB_PARTITION",
        "SLURM_JOB_QOS",
        "SLURM_JOB_RESERVATION",
        "SLURM_JOB_UID",
        "SLURM_JOB_USER",
        "SLURM_JOBID",
        "SLURM_MEM_PER_CPU",
        "SLURM_MEM_PER_NODE",
        "SLURM_SUBMIT_DIR",
        "SLURM_SUBMIT_HOST",
        "SLURMD_NODENAME",
    }
)


def job_environment(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` of a process inside the workers' srun step, as a rule's command should see it.

    A rule that runs ``srun`` itself (e.g. an MPI rule) must get the allocation, not the
    workers' step: the step's SLURM_NODELIST, SLURM_NTASKS or SLURM_CPUS_PER_TASK would
    otherwise shrink or reshape the rule's own step. Like snakemake-executor-plugin-
    slurm-jobstep, keep only the job-level variables and restore the node list and node
    count the job itself has.
    """
    kept = {
        k: v
        for k, v in env.items()
        if not k.startswith(("SLURM_", "SRUN_", "SBATCH_", "SALLOC_")) or k in JOB_LEVEL_VARIABLES
    }
    if "SLURM_JOB_NODELIST" in kept:
        kept["SLURM_NODELIST"] = kept["SLURM_JOB_NODELIST"]
    if "SLURM_JOB_NUM_NODES" in kept:
        kept["SLURM_NNODES"] = kept["SLURM_JOB_NUM_NODES"]
    return kept


def process_environment(adds: Iterable[tuple[str, str]]) -> dict[bytes, bytes]:
    """This process's environment with ``adds`` on top, in bytes, the form ``Popen`` hands
    to the kernel: copied from ``os.environ``'s own bytes (CPython keeps them on POSIX), so
    that no variable is decoded and encoded again for every job (about 0.1 ms of a worker's
    CPU per job)."""
    data = getattr(os.environ, "_data", None)
    if isinstance(data, dict):
        env: dict[bytes, bytes] = dict(data)
    else:  # another Python: the same, the long way
        env = {os.fsencode(k): os.fsencode(v) for k, v in os.environ.items()}
    for name, value in adds:
        env[_encoded(name)] = os.fsencode(value)
    return env


@functools.lru_cache(maxsize=256)
def _encoded(name: str) -> bytes:
    return os.fsencode(name)
