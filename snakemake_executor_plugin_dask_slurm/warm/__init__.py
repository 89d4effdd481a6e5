"""The warm path: Snakemake's job command, run in a process forked from one that already
imported Snakemake and parsed the workflow (see docs/architecture.md, "The warm path").

Beside each Dask worker runs one *zygote* (:mod:`.zygote`): single-threaded, it imported
Snakemake and its plugins once. For each distinct job command (Snakemake's arguments
without the per-job ones) it forks a *primed server* (:mod:`.primed`), which parses the
workflow once, exactly as that command would, and then forks one child per job
(:mod:`.child`) that runs the rest of Snakemake's own ``main()``: the one-job DAG, the job,
its post-processing.

This subpackage imports Snakemake (only in the warm processes) and the standard library,
and of the plugin only :mod:`..worker` (stdlib): never Dask, ``clusters/`` or
``dispatch/``, so that the zygote starts as fast as Snakemake does
(``tests/component/test_layering.py``).
"""

ZYGOTE_MODULE = f"{__name__}.zygote"
