"""Worker jobs: the farm grows with sbatch jobs whose Dask workers join the run's scheduler.

- :mod:`.policy`: when to submit, cancel or retire worker jobs (pure, table-tested);
- :mod:`.provider`: SLURM's side (Parsl's provider shape): ``sbatch --test-only`` at
  start-up, then submit, status, cancel, and a step in a worker job;
- :mod:`.job`: one worker job's state machine (its states, what the plugin did to it, its
  end);
- :mod:`.landing`: each worker job's landing before its time limit;
- :mod:`.pool`: the loop in Snakemake's process (the thread that watches the load and
  acts, one ``scancel`` at the end);
- :mod:`.growing`: the run's cluster source plus the pool, as one source (what a worker
  job's worker needs of the source: a sweep, its end, whether a job was lost with it);
- :mod:`.in_job`: what runs inside a worker job, on its first node (one srun step of
  workers per node size).
"""
