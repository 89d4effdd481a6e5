"""SLURM knowledge: what an allocation granted, its node and CPU lists, job states, the
worker layout, and the argument lists of SLURM's commands (pure); plus the one runner
every ``scontrol``/``srun``/``sbatch``/``scancel``/``squeue`` call goes through
(:mod:`.run`). Never imports the cluster lifecycle or dispatch."""
