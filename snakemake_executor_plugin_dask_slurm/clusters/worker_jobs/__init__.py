"""Worker jobs: the farm grows with sbatch jobs whose Dask workers join the run's scheduler.

- :mod:`.policy`: when to submit, cancel or retire worker jobs (pure, table-tested);
- :mod:`.pool`: the submitting side, in Snakemake's process (``sbatch --test-only`` at
  start-up, the thread that watches the load and acts, one ``scancel`` at the end);
- :mod:`.in_job`: what runs inside a worker job, on its first node (one srun step of
  workers per node size).
"""
