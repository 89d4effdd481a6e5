"""Command builders: exact argument lists, invalid options, and the node-named worker."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from snakemake_executor_plugin_dask_slurm.commands import (
    SchedulerOptions,
    WorkerOptions,
    dask_option_names,
    format_resources,
    node_worker_command,
    scheduler_command,
    srun_step_command,
    worker_command,
)
from snakemake_executor_plugin_dask_slurm.layout import NodeGroup
from snakemake_executor_plugin_dask_slurm.node_worker import node_name, worker_exec_argv

PY = "/venv/bin/python"
SCHED = [PY, "-m", "distributed.cli.dask_scheduler", "--scheduler-file", "/run/s.json"]


@pytest.mark.parametrize(
    ("opts", "tail"),
    [
        (SchedulerOptions("/run/s.json"), ["--port", "0", "--dashboard-address", ":0"]),
        (
            SchedulerOptions("/run/s.json", host="10.77.0.1", port=8786, dashboard_address=None),
            ["--host", "10.77.0.1", "--port", "8786", "--dashboard-address", "127.0.0.1:0"],
        ),
        (
            SchedulerOptions("/run/s.json", interface="ib0", extra_args=("--preload", "m")),
            ["--interface", "ib0", "--port", "0", "--dashboard-address", ":0", "--preload", "m"],
        ),
    ],
)
def test_scheduler_command(opts: SchedulerOptions, tail: list[str]) -> None:
    assert scheduler_command(PY, opts) == SCHED + tail


def test_scheduler_command_rejects_host_and_interface() -> None:
    with pytest.raises(ValueError, match=r"host \(10.0.0.1\) or an interface \(ib0\), not both"):
        scheduler_command(PY, SchedulerOptions("/s", host="10.0.0.1", interface="ib0"))


WORKER_DEFAULT_TAIL = [
    "--nanny",
    "--death-timeout",
    "60",
    "--memory-limit",
    "0",
    "--no-dashboard",
]


@pytest.mark.parametrize(
    ("opts", "argv"),
    [
        (
            WorkerOptions("/run/s.json", nthreads=4),
            [
                *("--scheduler-file", "/run/s.json", "--nthreads", "4", "--nworkers", "1"),
                *WORKER_DEFAULT_TAIL,
            ],
        ),
        (
            WorkerOptions(
                "/run/s.json",
                nthreads=2,
                nworkers=3,
                resources=(("mem_mb", 2000.0), ("cpus", 2)),
                name="local",
                local_directory="/tmp/dask",
                interface="ib0",
                nanny=False,
                death_timeout=7.5,
                memory_limit="4GB",
                dashboard=True,
                extra_args=("--preload", "pkg.mod"),
            ),
            [
                *("--scheduler-file", "/run/s.json", "--nthreads", "2", "--nworkers", "3"),
                *("--resources", "cpus=2,mem_mb=2000", "--name", "local"),
                *("--local-directory", "/tmp/dask", "--interface", "ib0", "--no-nanny"),
                *("--death-timeout", "7.5", "--memory-limit", "4GB", "--dashboard"),
                *("--preload", "pkg.mod"),
            ],
        ),
    ],
)
def test_worker_command(opts: WorkerOptions, argv: list[str]) -> None:
    assert worker_command(PY, opts) == [PY, "-m", "distributed.cli.dask_worker", *argv]


@pytest.mark.parametrize(
    ("nthreads", "nworkers"),
    [(0, 1), (1, 0), (-1, 1)],
)
def test_worker_command_rejects_empty_workers(nthreads: int, nworkers: int) -> None:
    with pytest.raises(ValueError, match="at least one process and one thread"):
        worker_command(PY, WorkerOptions("/s", nthreads=nthreads, nworkers=nworkers))


@pytest.mark.parametrize(
    ("resources", "text"),
    [
        ((("cpus", 4), ("mem_mb", 2000)), "cpus=4,mem_mb=2000"),
        ((("mem_mb", 2000.0), ("cpus", 4.0)), "cpus=4,mem_mb=2000"),
        ((("gpu", 0.5),), "gpu=0.5"),
        ((("cpus", 1e-3),), "cpus=0.001"),
        ((), ""),
    ],
)
def test_format_resources(resources: tuple[tuple[str, float], ...], text: str) -> None:
    assert format_resources(resources) == text


@pytest.mark.parametrize("name", ["", "a=b", "a,b", "a b"])
def test_format_resources_rejects_names(name: str) -> None:
    with pytest.raises(ValueError, match="cannot be passed to 'dask worker --resources'"):
        format_resources(((name, 1),))


def test_node_worker_command_leaves_the_name_to_the_node() -> None:
    opts = WorkerOptions("/run/s.json", nthreads=8, resources=(("cpus", 8),))
    assert node_worker_command(PY, opts) == [
        *(PY, "-m", "snakemake_executor_plugin_dask_slurm.node_worker"),
        *("--scheduler-file", "/run/s.json", "--nthreads", "8", "--nworkers", "1"),
        *("--resources", "cpus=8"),
        *WORKER_DEFAULT_TAIL,
    ]
    with pytest.raises(ValueError, match="named after their node"):
        node_worker_command(PY, WorkerOptions("/s", nthreads=1, name="x"))


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
            ["--nodes=1", "--ntasks=1", "--ntasks-per-node=1", "--nodelist=n3"],
        ),
    ],
)
def test_srun_step_command(group: NodeGroup, srun_args: list[str], head: list[str]) -> None:
    payload = [PY, "-m", "snakemake_executor_plugin_dask_slurm.node_worker", "--nthreads", "4"]
    argv = srun_step_command(
        group, job_name="dask-workers", srun_args=srun_args, payload=payload, srun="/usr/bin/srun"
    )
    assert argv == [
        "/usr/bin/srun",
        *head,
        f"--cpus-per-task={group.cpus}",
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


def test_dask_option_names() -> None:
    argv = worker_command(
        PY, WorkerOptions("/s", nthreads=1, extra_args=("--preload=m", "--tls-cert", "c.pem"))
    )
    assert dask_option_names(argv) == (
        "--scheduler-file",
        "--nthreads",
        "--nworkers",
        "--nanny",
        "--death-timeout",
        "--memory-limit",
        "--no-dashboard",
        "--preload",
        "--tls-cert",
    )


@pytest.mark.parametrize(
    ("env", "hostname", "name"),
    [
        ({"SLURMD_NODENAME": "n3"}, "n3.cluster.example", "n3"),
        ({}, "laptop", "laptop"),
        ({"SLURMD_NODENAME": " "}, "laptop", "laptop"),
    ],
)
def test_node_name(env: dict[str, str], hostname: str, name: str) -> None:
    assert node_name(env, hostname) == name


def test_worker_exec_argv_adds_the_name() -> None:
    assert worker_exec_argv(PY, "n2", ["--nthreads", "4"]) == [
        *(PY, "-m", "distributed.cli.dask_worker", "--name", "n2", "--nthreads", "4")
    ]


@pytest.mark.parametrize("args", [["--name", "x"], ["--nthreads", "1", "--name=x"]])
def test_worker_exec_argv_refuses_a_second_name(args: list[str]) -> None:
    with pytest.raises(ValueError, match="remove --name"):
        worker_exec_argv(PY, "n2", args)


def test_node_worker_execs_the_real_dask_worker() -> None:
    # --version makes dask worker print and exit, so this runs the real exec path.
    done = subprocess.run(
        [sys.executable, "-m", "snakemake_executor_plugin_dask_slurm.node_worker", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, SLURMD_NODENAME="n9"),
    )
    assert done.returncode == 0, done.stderr
    assert "version" in done.stdout
