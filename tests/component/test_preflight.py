"""Preflight against the real installed Dask CLI and broken interpreters."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from snakemake_executor_plugin_dask_slurm.clusters import preflight
from snakemake_executor_plugin_dask_slurm.clusters.dask_argv import (
    SUPERVISOR_MODULE,
    SchedulerOptions,
    SupervisorOptions,
    WorkerOptions,
    dask_option_names,
    scheduler_command,
    supervised_worker_command,
)
from snakemake_executor_plugin_dask_slurm.clusters.preflight import PreflightError, check_dask_cli

PY = sys.executable


def script(directory: Path, name: str, body: str) -> Path:
    path = directory / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


# Every option the plugin's builders can emit, plus the TLS options security.py will add.
SCHEDULER_ARGV = scheduler_command(
    PY,
    SchedulerOptions(
        "/s.json",
        host="10.0.0.1",
        extra_args=("--preload", "m", "--tls-ca-file", "ca", "--protocol", "tls"),
    ),
)
SCHEDULER_OPTIONS = (*dask_option_names(SCHEDULER_ARGV), "--interface", "--no-dashboard")
WORKER_ARGV = supervised_worker_command(
    PY,
    SupervisorOptions("/w"),
    WorkerOptions(
        "/s.json",
        nthreads=2,
        resources=(("cpus", 2),),
        local_directory="/tmp",
        interface="ib0",
        extra_args=("--preload", "m", "--tls-cert", "c", "--tls-key", "k"),
    ),
)
# --name is added by the supervisor.
WORKER_OPTIONS = (*dask_option_names(WORKER_ARGV), "--name", "--no-nanny", "--dashboard")


def test_the_installed_dask_accepts_every_option_the_plugin_passes() -> None:
    check_dask_cli(PY, SCHEDULER_OPTIONS, WORKER_OPTIONS, timeout=60)


def test_through_the_supervisor_the_plugin_and_dask_are_both_checked() -> None:
    check_dask_cli(
        PY, SCHEDULER_OPTIONS, WORKER_OPTIONS, timeout=60, worker_module=SUPERVISOR_MODULE
    )
    with pytest.raises(PreflightError, match="'dask worker' does not accept --bogus"):
        check_dask_cli(PY, (), ("--bogus",), timeout=60, worker_module=SUPERVISOR_MODULE)


def test_an_option_of_the_users_worker_args_is_blamed_on_that_setting_once() -> None:
    from snakemake_executor_plugin_dask_slurm.clusters.preflight import check_plan

    user = ("--bogus-flag", "1")
    steps = [[*WORKER_ARGV, *user], [*WORKER_ARGV, *user]]  # two srun steps, one option
    with pytest.raises(PreflightError) as caught:
        check_plan(SCHEDULER_ARGV, steps, user)
    assert str(caught.value) == (
        f"--dask-slurm-worker-args: 'dask worker' does not accept --bogus-flag (the Dask "
        f"installed for {PY}). Check the option against 'dask worker --help', or leave it out."
    )


@pytest.mark.parametrize(
    ("scheduler", "worker", "named"),
    [
        (
            ("--no-such-option",),
            (),
            "'dask scheduler' does not accept --no-such-option. ",
        ),
        (
            ("--host",),
            ("--nthreads", "--nprocs", "--bogus"),
            "'dask worker' does not accept --nprocs, --bogus. ",
        ),
        (
            ("--nworkers", "--host"),
            ("--nworkers", "--port"),
            "'dask scheduler' does not accept --nworkers; 'dask worker' does not accept --port. ",
        ),
    ],
)
def test_unknown_options_are_named(
    scheduler: tuple[str, ...], worker: tuple[str, ...], named: str
) -> None:
    with pytest.raises(PreflightError) as caught:
        check_dask_cli(PY, scheduler, worker, timeout=60)
    assert str(caught.value) == (
        f"The Dask installed for {PY} does not accept options the plugin passes: {named}"
        "Its distributed is probably older or newer than the plugin supports (2026.8 to "
        "<2027). Install Dask's distributed in that "
        f"environment ('{PY} -m pip install \"distributed>=2026.8\"'), or point the plugin "
        "at an interpreter that has it."
    )


def test_interpreter_without_distributed(tmp_path: Path) -> None:
    # -I -S: the same Python with no site-packages, so distributed cannot be imported.
    bare = script(tmp_path, "python", f'exec "{PY}" -I -S "$@"')
    with pytest.raises(PreflightError) as caught:
        check_dask_cli(str(bare), ("--host",), ("--nthreads",), timeout=30)
    message = str(caught.value)
    assert f"'{bare} -m distributed.cli.dask_" in message
    assert "failed with exit code 1" in message
    assert "No module named 'distributed'" in message
    assert f"'{bare} -m pip install \"distributed>=2026.8\"'" in message


def test_interpreter_without_the_plugin(tmp_path: Path) -> None:
    bare = script(tmp_path, "python", f'exec "{PY}" -I -S "$@"')
    with pytest.raises(PreflightError) as caught:
        check_dask_cli(str(bare), (), (), timeout=30, worker_module=SUPERVISOR_MODULE)
    message = str(caught.value)
    assert "No module named 'snakemake_executor_plugin_dask_slurm'" in message
    assert f"'{bare} -m pip install snakemake-executor-plugin-dask-slurm'" in message


@pytest.mark.parametrize("name", ["missing-python", "not-executable"])
def test_interpreter_that_cannot_run(tmp_path: Path, name: str) -> None:
    python = tmp_path / name
    if name == "not-executable":
        python.write_text("")
    with pytest.raises(PreflightError, match=f"The Python interpreter '{python}' cannot be run"):
        check_dask_cli(str(python), (), (), timeout=30)


def test_interpreter_that_hangs(tmp_path: Path) -> None:
    slow = script(tmp_path, "python", "exec sleep 30")
    with pytest.raises(PreflightError, match=r"did not answer within 0\.3 s"):
        check_dask_cli(str(slow), (), (), timeout=0.3)


def test_help_runs_once_per_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    check_dask_cli(PY, ("--host",), ("--nthreads",), timeout=60)

    def no_more_processes(*args: object, **kwargs: object) -> None:
        raise AssertionError("--help was run again")

    monkeypatch.setattr(preflight.subprocess, "run", no_more_processes)
    check_dask_cli(PY, ("--port",), ("--nworkers",), timeout=60)


@pytest.mark.parametrize(
    "module", ["distributed.cli.dask_scheduler", "distributed.cli.dask_worker"]
)
def test_in_process_options_match_the_real_help(module: str) -> None:
    import re
    import subprocess
    import sys

    from snakemake_executor_plugin_dask_slurm.clusters.preflight import _options_in_process

    inproc = _options_in_process(module)
    assert inproc is not None
    real = subprocess.run(
        [sys.executable, "-m", module, "--help"], capture_output=True, text=True, check=True
    ).stdout
    declared = set(inproc.split())
    shown = set(re.findall(r"--[A-Za-z0-9][A-Za-z0-9-]*", real)) - {"--help"}
    assert declared <= shown
    # --help wraps long lines, so it also shows fragments like "--worker-".
    assert all(any(d.startswith(s) for d in declared) for s in shown - declared)
