"""Start a Dask worker named after the node it runs on: the payload of an srun step.

An srun step gives every node the same command line, so a per-node name has to be added
on the node. Named workers make the scheduler's worker list and every log line say which
node a job ran on. This replaces itself (``execve``) with ``dask worker`` so that srun's
signals reach the worker directly, and drops the step's own SLURM variables on the way
(see :func:`.slurm_env.job_environment`).

Usage (inside an srun step): ``python -m snakemake_executor_plugin_dask_slurm.node_worker
<dask worker options without --name>``.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping, Sequence

from .commands import WORKER_MODULE
from .slurm_env import job_environment


def node_name(env: Mapping[str, str], hostname: str) -> str:
    """The name SLURM uses for this node, or the host name outside a SLURM step."""
    return env.get("SLURMD_NODENAME", "").strip() or hostname


def worker_exec_argv(python: str, name: str, args: Sequence[str]) -> list[str]:
    """The ``dask worker`` command line with ``--name`` added."""
    if any(a == "--name" or a.startswith("--name=") for a in args):
        raise ValueError(
            "node_worker names the worker after its node itself; remove --name from its "
            f"arguments: {' '.join(args)}"
        )
    return [python, "-m", WORKER_MODULE, "--name", name, *args]


def main(argv: Sequence[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    name = node_name(os.environ, socket.gethostname())
    command = worker_exec_argv(sys.executable, name, args)
    sys.stdout.flush()
    sys.stderr.flush()
    # The worker and the rules it runs see the allocation, not this srun step.
    os.execve(command[0], command, job_environment(os.environ))


if __name__ == "__main__":
    main()
