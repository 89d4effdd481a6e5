"""``python -m snakemake_executor_plugin_dask_slurm status [WORKDIR]``: the run's status
from any shell (:mod:`.report.status_command`); standard library only."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "status":
        print(
            "usage: python -m snakemake_executor_plugin_dask_slurm status [WORKDIR] [--json]\n"
            "(the plugin itself runs through Snakemake: snakemake --executor dask-slurm)",
            file=sys.stderr,
        )
        return 2
    from .report.status_command import main as status

    return status(args[1:])


if __name__ == "__main__":
    sys.exit(main())
