"""The Snakemake executor, as glue: :mod:`.plugin` holds Snakemake's hooks, which call out
to one run, planned, launched, started and wired in :mod:`.run`; to dispatch's two ends
(:mod:`..dispatch.ends`: a chunk of jobs handed over, a finished task settled); to
:mod:`.failures` (what a task's end asks of the cluster, a dead worker's jobs, a broken
cluster) and :mod:`.signals` (SIGTERM, SIGUSR1). The only package that imports both
``clusters/`` and ``dispatch/``."""

from .plugin import Executor

__all__ = ["Executor"]
