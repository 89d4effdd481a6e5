"""The dask scheduler/worker and supervisor argument lists: exact lists, invalid options."""

from __future__ import annotations

import pytest

from snakemake_executor_plugin_dask_slurm.clusters.dask_argv import (
    SchedulerOptions,
    SupervisorOptions,
    WorkerOptions,
    dask_option_names,
    deferred_options,
    resources_option,
    scheduler_command,
    supervised_worker_command,
    worker_args,
)

PY = "/venv/bin/python"
#: Dask's commands run through the plugin's entry without NumPy (worker/dask_main.py).
DASK_MAIN = "snakemake_executor_plugin_dask_slurm.worker.dask_main"
SCHED = [PY, "-m", DASK_MAIN, "distributed.cli.dask_scheduler", "--scheduler-file", "/run/s.json"]


@pytest.mark.parametrize(
    ("opts", "tail"),
    [
        (SchedulerOptions("/run/s.json"), ["--port", "0", "--dashboard-address", "127.0.0.1:0"]),
        (
            SchedulerOptions("/run/s.json", host="10.77.0.1", port=8786, dashboard=False),
            [
                "--host",
                "10.77.0.1",
                "--port",
                "8786",
                "--dashboard-address",
                "127.0.0.1:0",
                "--no-dashboard",
            ],
        ),
        (
            SchedulerOptions(
                "/run/s.json",
                interface="ib0",
                dashboard_address=":8787",
                extra_args=("--preload", "m"),
            ),
            ["--interface", "ib0", "--port", "0", "--dashboard-address", ":8787", "--preload", "m"],
        ),
    ],
)
def test_scheduler_command(opts: SchedulerOptions, tail: list[str]) -> None:
    assert scheduler_command(PY, opts) == SCHED + tail


def test_scheduler_command_rejects_host_and_interface() -> None:
    with pytest.raises(ValueError, match=r"host \(10.0.0.1\) or an interface \(ib0\), not both"):
        scheduler_command(PY, SchedulerOptions("/s", host="10.0.0.1", interface="ib0"))


WORKER_DEFAULT_TAIL = [
    "--no-nanny",
    "--death-timeout",
    "60",
    "--memory-limit",
    "0",
    "--no-dashboard",
    "--dashboard-address",
    "127.0.0.1:0",
]


@pytest.mark.parametrize(
    ("opts", "argv"),
    [
        (
            WorkerOptions("/run/s.json", nthreads=4),
            [*("--scheduler-file", "/run/s.json", "--nthreads", "4"), *WORKER_DEFAULT_TAIL],
        ),
        (
            WorkerOptions(
                "/run/s.json",
                nthreads=2,
                resources=(("mem_mb", 2000.0), ("cpus", 2)),
                local_directory="/tmp/dask",
                interface="ib0",
                death_timeout=7.5,
                memory_limit="4GB",
                dashboard=True,
                extra_args=("--preload", "pkg.mod"),
            ),
            [
                *("--scheduler-file", "/run/s.json", "--nthreads", "2"),
                *("--resources", "cpus=2,mem_mb=2000"),
                *("--local-directory", "/tmp/dask", "--interface", "ib0", "--no-nanny"),
                *("--death-timeout", "7.5", "--memory-limit", "4GB", "--dashboard"),
                *("--dashboard-address", "127.0.0.1:0", "--preload", "pkg.mod"),
            ],
        ),
    ],
)
def test_worker_args(opts: WorkerOptions, argv: list[str]) -> None:
    assert worker_args(opts) == argv


@pytest.mark.parametrize("nthreads", [0, -1])
def test_worker_args_rejects_empty_workers(nthreads: int) -> None:
    with pytest.raises(ValueError, match="at least one thread"):
        worker_args(WorkerOptions("/s", nthreads=nthreads))


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
    assert resources_option(resources) == text


@pytest.mark.parametrize("name", ["", "a=b", "a,b", "a b"])
def test_format_resources_rejects_names(name: str) -> None:
    with pytest.raises(ValueError, match="cannot be passed to 'dask worker --resources'"):
        resources_option(((name, 1),))


@pytest.mark.parametrize(
    ("supervisor", "head"),
    [
        (SupervisorOptions("/run/workers"), ["--record-dir", "/run/workers", "--restarts", "0"]),
        (
            SupervisorOptions("/run/workers", name="local-1", indexed=False, restarts=3),
            ["--name", "local-1", "--record-dir", "/run/workers", "--restarts", "3"],
        ),
        (
            SupervisorOptions("/w", indexed=True),
            ["--indexed", "--record-dir", "/w", "--restarts", "0"],
        ),
    ],
)
def test_supervised_worker_command(supervisor: SupervisorOptions, head: list[str]) -> None:
    opts = WorkerOptions("/run/s.json", nthreads=8, resources=(("cpus", 8),))
    assert supervised_worker_command(PY, supervisor, opts) == [
        *(PY, "-m", "snakemake_executor_plugin_dask_slurm.worker.supervisor", *head, "--"),
        *("--scheduler-file", "/run/s.json", "--nthreads", "8"),
        *("--resources", "cpus=8"),
        *WORKER_DEFAULT_TAIL,
    ]


def test_a_command_whose_options_come_later_splits_from_the_planned_one() -> None:
    """The early start's command (no worker options, ``--worker-args-on-stdin``) is the
    planned command's head, and the rest what the worker is sent."""
    supervisor = SupervisorOptions("/run/workers", name="local")
    opts = WorkerOptions("/run/s.json", nthreads=2, resources=(("cpus", 2),))
    planned = supervised_worker_command(PY, supervisor, opts)
    early = supervised_worker_command(PY, supervisor, None)
    assert early[-2:] == ["--worker-args-on-stdin", "--"]
    assert deferred_options(planned) == (early, planned[planned.index("--") + 1 :])
    assert deferred_options(planned)[1][:2] == ["--scheduler-file", "/run/s.json"]


def test_dask_option_names() -> None:
    argv = supervised_worker_command(
        PY,
        SupervisorOptions("/w", name="x"),
        WorkerOptions("/s", nthreads=1, extra_args=("--preload=m", "--tls-cert", "c.pem")),
    )
    assert dask_option_names(argv) == (
        "--scheduler-file",
        "--nthreads",
        "--no-nanny",
        "--death-timeout",
        "--memory-limit",
        "--no-dashboard",
        "--dashboard-address",
        "--preload",
        "--tls-cert",
    )
