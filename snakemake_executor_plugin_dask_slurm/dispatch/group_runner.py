"""The general way's entry point for group jobs: Snakemake's CLI, with a race in its
local executor closed (:func:`..snakemake_internals.shell.remember_kills` says which).

Usage: ``python -m snakemake_executor_plugin_dask_slurm.dispatch.group_runner <args>``,
with the arguments of ``python -m snakemake``.
"""

from __future__ import annotations

from ..snakemake_internals.shell import Processes, remember_kills, remember_shell_kills

MODULE = "snakemake_executor_plugin_dask_slurm.dispatch.group_runner"
__all__ = ["MODULE", "Processes", "main", "remember_kills"]


def main() -> None:
    # Imported here: job_commands imports MODULE, and does not need Snakemake's CLI for it.
    # The group job's own Snakemake: an entry point, allowed outside snakemake_internals/
    # (tests/component/test_layering.py, ENTRY_POINTS).
    from snakemake.cli import main as snakemake_main

    remember_shell_kills()
    snakemake_main()  # reads sys.argv[1:], exits


if __name__ == "__main__":
    main()
