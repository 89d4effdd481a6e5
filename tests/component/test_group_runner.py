"""The group runner's fix of Snakemake's pipe-group kill, against Snakemake's real
``shell`` and real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
from snakemake.shell import shell

from snakemake_executor_plugin_dask_slurm.dispatch import group_runner
from tests.waiting import eventually


@pytest.fixture
def patched_shell(monkeypatch: pytest.MonkeyPatch) -> type:
    # remember_kills() changes Snakemake's class for the whole process: undone after the test.
    monkeypatch.setattr(shell, "_processes", {})
    monkeypatch.setattr(shell, "kill", shell.__dict__["kill"])
    assert group_runner.remember_kills(shell)
    return shell


def run_as_job(jobid: int, command: str) -> list[BaseException]:
    """Run ``command`` as a rule's shell() does (registered under ``jobid``); its errors."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            shell(command, jobid=jobid)
        except BaseException as e:
            errors.append(e)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "the job's shell was not killed"
    return errors


def test_a_job_killed_before_its_shell_started_is_killed_as_it_starts(
    patched_shell: type,
) -> None:
    # Snakemake's run_group_job kills every job of a failed pipe group, also one whose
    # shell has not started yet; unpatched, that shell runs on (here 60 s; a pipe's
    # consumer: for ever, blocked opening a pipe whose producer is gone).
    patched_shell.kill(7)
    started = time.monotonic()
    errors = run_as_job(7, "sleep 60")
    assert time.monotonic() - started < 5
    assert errors and isinstance(errors[0], subprocess.CalledProcessError)
    assert errors[0].returncode == -9
    assert 7 not in patched_shell._processes


def test_a_running_job_is_killed_as_before_and_others_run(patched_shell: type) -> None:
    errors: list[BaseException] = []
    thread = threading.Thread(target=lambda: errors.extend(run_as_job(3, "sleep 60")))
    thread.start()
    eventually("job 3's shell started", lambda: 3 in patched_shell._processes, 10, 0.02)
    patched_shell.kill(3)
    thread.join(10)
    assert errors and errors[0].returncode == -9
    assert run_as_job(4, "true") == []


def test_unknown_internals_are_left_alone() -> None:
    class Other:
        pass

    assert not group_runner.remember_kills(Other)
    assert not hasattr(Other, "kill")


def test_the_group_runner_is_snakemakes_cli() -> None:
    done = subprocess.run(
        [sys.executable, "-m", group_runner.MODULE, "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == __import__("snakemake").__version__
