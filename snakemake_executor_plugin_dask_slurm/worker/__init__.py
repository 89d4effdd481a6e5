"""What runs inside Dask's own processes, not in Snakemake's: the supervisor that starts
each worker, the task that runs one job, the preloads of the workers and the scheduler.

Standard library and this subpackage only (``tests/component/test_layering.py`` checks
it): this is the code a node runs; importing it must not import Snakemake or the rest of
the plugin.

The module paths below are how the plugin names these modules on command lines
(``python -m ...``, ``--preload ...``); they are derived here, once.
"""

SUPERVISOR_MODULE = f"{__name__}.supervisor"
#: ``python -m`` this, then Dask's command module: the scheduler and workers without NumPy.
DASK_MAIN_MODULE = f"{__name__}.dask_main"
#: Dask's worker command, which the supervisor runs through DASK_MAIN_MODULE.
DASK_WORKER_MODULE = "distributed.cli.dask_worker"
TASK_MODULE = f"{__name__}.task"
SCHEDULER_PRELOAD_MODULE = f"{__name__}.scheduler_preload"
