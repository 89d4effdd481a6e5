"""A job's environment inside an srun step: the allocation's variables kept, the step's dropped."""

from __future__ import annotations


def test_job_environment_keeps_the_allocation_and_drops_the_step() -> None:
    from snakemake_executor_plugin_dask_slurm.worker.environment import job_environment

    step = {
        "PATH": "/bin",
        "SLURM_JOB_ID": "7",
        "SLURM_JOB_NODELIST": "n[1-3]",
        "SLURM_JOB_NUM_NODES": "3",
        "SLURM_JOB_CPUS_PER_NODE": "4(x2),8",
        "SLURM_NODELIST": "n[1-2]",
        "SLURM_NNODES": "2",
        "SLURM_STEP_ID": "0",
        "SLURM_STEP_NODELIST": "n[1-2]",
        "SLURM_NTASKS": "2",
        "SLURM_CPUS_PER_TASK": "4",
        "SLURM_CPUS_ON_NODE": "4",
        "SLURM_OVERLAP": "1",
        "SRUN_DEBUG": "3",
        "SLURMD_NODENAME": "n1",
        "SLURM_CONF": "/etc/slurm.conf",
    }
    assert job_environment(step) == {
        "PATH": "/bin",
        "SLURM_JOB_ID": "7",
        "SLURM_JOB_NODELIST": "n[1-3]",
        "SLURM_JOB_NUM_NODES": "3",
        "SLURM_JOB_CPUS_PER_NODE": "4(x2),8",
        "SLURM_NODELIST": "n[1-3]",
        "SLURM_NNODES": "3",
        "SLURMD_NODENAME": "n1",
        "SLURM_CONF": "/etc/slurm.conf",
    }
