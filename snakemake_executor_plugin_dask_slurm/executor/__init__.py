"""The Snakemake executor, as glue: :mod:`.plugin` holds Snakemake's hooks, which call out
to :mod:`.failures` (what becomes of every task that ended, of a dead worker's jobs, of a
broken cluster) and :mod:`.signals` (SIGTERM, SIGUSR1). The only package that imports
both ``clusters/`` and ``dispatch/``."""

from .plugin import Executor

__all__ = ["Executor"]
