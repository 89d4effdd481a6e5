"""srun step and sweep step argument lists."""

from __future__ import annotations

import pytest

from snakemake_executor_plugin_dask_slurm.slurm.argv import srun_step_command, sweep_step_command
from snakemake_executor_plugin_dask_slurm.slurm.layout import NodeGroup

PY = "/venv/bin/python"


def test_sweep_step_command() -> None:
    assert sweep_step_command("n3", PY, ["--sweep", "k1", "k2"], "srun") == [
        *("srun", "--overlap", "--nodes=1", "--ntasks=1", "--nodelist=n3"),
        *("--cpus-per-task=1", "--input=none", "--export=ALL", "--job-name=dask-slurm-sweep"),
        *(
            PY,
            "-m",
            "snakemake_executor_plugin_dask_slurm.worker.supervisor",
            "--sweep",
            "k1",
            "k2",
        ),
    ]


@pytest.mark.parametrize(
    ("group", "srun_args", "head"),
    [
        (
            NodeGroup(("n1", "n2"), 4, 1, 4),
            [],
            ["--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--nodelist=n1,n2"],
        ),
        (
            NodeGroup(("n3",), 8, 2, 4),
            ["--partition=debug", "--cpu-bind=none"],
            ["--nodes=1", "--ntasks=2", "--ntasks-per-node=2", "--nodelist=n3"],
        ),
    ],
)
def test_srun_step_command(group: NodeGroup, srun_args: list[str], head: list[str]) -> None:
    payload = [
        PY,
        "-m",
        "snakemake_executor_plugin_dask_slurm.worker.supervisor",
        "--",
        "--nthreads",
        "4",
    ]
    argv = srun_step_command(
        group, job_name="dask-workers", srun_args=srun_args, payload=payload, srun="/usr/bin/srun"
    )
    assert argv == [
        "/usr/bin/srun",
        *head,
        f"--cpus-per-task={group.threads_per_worker}",
        "--mem=0",
        "--overlap",
        "--kill-on-bad-exit=0",
        "--input=none",
        "--export=ALL",
        "--job-name=dask-workers",
        *srun_args,
        *payload,
    ]


def test_srun_defaults_to_srun_on_path() -> None:
    argv = srun_step_command(NodeGroup(("n1",), 1, 1, 1), job_name="j", srun_args=(), payload=["x"])
    assert argv[0] == "srun"
    assert argv[-1] == "x"
