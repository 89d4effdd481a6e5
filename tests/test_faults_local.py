"""Faults as users meet them, on the embedded local cluster: a worker killed outright
(with and without restarts), a job that kills its worker every time, the scheduler killed,
jobs that start daemons. Every output's content is checked afterwards, and that no two
copies of a job ever ran at once."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.appenders import (
    alive,
    check_never_two_at_once,
    check_outputs,
    holding,
    interrupted,
    kill_worker_when_busy,
    lost_lines,
    sleeping_in,
    started,
    worker_pids,
)
from tests.conftest import VENV_BIN, Workflow, live_processes
from tests.waiting import eventually, still_running

pytestmark = pytest.mark.e2e

COUNT, STEPS = 8, 5


def start(workflow: Workflow, *args: str, config: tuple[str, ...] = ()) -> subprocess.Popen[str]:
    argv = [
        str(VENV_BIN / "snakemake"), "--executor", "dask-slurm", "--jobs", "10",
        "--config", f"token={workflow.token}", f"count={COUNT}", f"steps={STEPS}", *config,
        *args,
    ]  # fmt: skip
    return subprocess.Popen(
        argv, cwd=workflow.path, env=workflow.env(), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def finish(proc: subprocess.Popen[str], timeout: float = 120) -> tuple[int, str]:
    try:
        output, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, output


def the_worker(workflow: Workflow, name: str) -> int:
    found = worker_pids(name, str(workflow.path))
    assert len(found) == 1, found
    return found[0]


@pytest.mark.workflow("appenders")
@pytest.mark.parametrize(
    ("args", "victim"),
    [
        (("--dask-slurm-workers", "2"), "local-0"),  # the run goes on on the other one
        (("--dask-slurm-nanny",), "local"),  # the only worker, restarted
    ],
    ids=["two-workers", "restarted"],
)
def test_a_killed_worker_costs_no_output(
    workflow: Workflow, args: tuple[str, ...], victim: str
) -> None:
    # No job ends while the worker is killed: its running jobs are exactly those whose copy
    # is cut short (a job ending just then was counted running, not interrupted).
    with holding(workflow.path) as hold:
        proc = start(workflow, *args, config=(hold,))
        _worker, its_jobs = kill_worker_when_busy(
            proc, workflow.path, lambda: the_worker(workflow, victim)
        )
        time.sleep(1.0)
        assert not alive(its_jobs), "the killed worker's jobs outlived it by a second"
    code, output = finish(proc)
    assert code == 0, output
    # One line for the lost worker: its running jobs are those whose copy was cut short.
    lines = lost_lines(output, victim)
    assert len(lines) == 1 and lines[0][0] == len(interrupted(workflow.path)), (lines, output)
    detail = workflow.read(".snakemake/dask-slurm/logs/plugin.log")
    assert f"was running on {victim} when that worker died" in detail, detail
    check_outputs(workflow.path, COUNT, STEPS)
    check_never_two_at_once(workflow.path)
    again = subprocess.run(
        [str(VENV_BIN / "snakemake"), "--executor", "dask-slurm", "--jobs", "1", "-n",
         "--config", f"token={workflow.token}", f"count={COUNT}", f"steps={STEPS}", hold],
        cwd=workflow.path, env=workflow.env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "Nothing to be done" in again.stdout + again.stderr, again


@pytest.mark.workflow("appenders")
def test_a_worker_that_stops_answering_is_noticed_in_seconds(workflow: Workflow) -> None:
    """kill -STOP of one of two workers while it runs jobs: within the worker-ttl (5 s here,
    Dask's floor for a few workers) it is removed, ended, and its jobs run again on the
    other one; one line says so; no job ever runs twice at once; every output whole."""
    # Its jobs cannot end while it is stopped (they would end by themselves well within the
    # ttl, and one whose start was reported would be counted running, not interrupted).
    with holding(workflow.path) as hold:
        proc = start(
            workflow, "--dask-slurm-workers", "2", "--dask-slurm-worker-ttl", "5",
            config=(hold,),
        )  # fmt: skip
        worker, its_jobs = kill_worker_when_busy(
            proc, workflow.path, lambda: the_worker(workflow, "local-0"), sig=signal.SIGSTOP
        )
        try:
            stopped = time.monotonic()
            eventually("the stopped worker ended", lambda: not alive([worker]), 30)
            ended = time.monotonic() - stopped
            # Not at once: the worker reads as gone from the moment it is a zombie (end_worker's
            # SIGKILL); only then does its supervisor reap it, scan and kill what its jobs left,
            # so they end a few milliseconds after it (more under load): 1 s bounds that lag.
            eventually("its jobs ended with it", lambda: not alive(its_jobs), 1.0)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker, signal.SIGKILL)
    code, output = finish(proc)
    assert code == 0, output
    assert ended < 20, f"the silent worker was ended {ended:.1f} s after it stopped"
    lines = [line for line in output.splitlines() if "stopped answering" in line]
    assert len(lines) == 1 and "worker local-0 stopped answering" in lines[0], output
    ((running, _waiting),) = lost_lines(output, "local-0")
    assert running == len(interrupted(workflow.path)), output
    check_outputs(workflow.path, COUNT, STEPS)
    check_never_two_at_once(workflow.path)


@pytest.mark.workflow("appenders")
def test_a_job_that_kills_its_worker_every_time_fails_alone(workflow: Workflow) -> None:
    proc = start(
        workflow, "--dask-slurm-workers", "2", "--dask-slurm-nanny", "--keep-going",
        config=("killer=3", "pause=0.2"),
    )  # fmt: skip
    code, output = finish(proc)
    assert code != 0, output
    assert "rule append" in output and "Its workers died under it on local-" in output, output
    assert "takes its worker down" in output
    assert output.count("Error in rule append") == 1, output
    check_outputs(workflow.path, COUNT, STEPS, skip=(3,))
    check_never_two_at_once(workflow.path)


@pytest.mark.workflow("appenders")
def test_a_killed_scheduler_ends_the_run_at_once_and_a_rerun_completes(
    workflow: Workflow,
) -> None:
    proc = start(workflow, "--dask-slurm-workers", "2")
    eventually("2 jobs started", lambda: started(workflow.path) >= 2, 60, 0.1, still_running(proc))
    scheduler = [pid for pid, cmd in live_processes("no-token", str(workflow.path))
                 if "distributed.cli.dask_scheduler" in cmd]  # fmt: skip
    assert len(scheduler) == 1
    killed = time.monotonic()
    os.kill(scheduler[0], signal.SIGKILL)
    code, output = finish(proc, timeout=30)
    took = time.monotonic() - killed
    assert code != 0, output
    assert took < 10, f"Snakemake took {took:.1f} s to end after the scheduler died"
    assert "the Dask scheduler was killed by signal SIGKILL" in output, output
    assert output.count("the Dask cluster broke") == 1, output
    assert "Traceback" not in output, output
    # (no_leftovers: nothing of the run is left running)
    rerun = start(workflow, "--dask-slurm-workers", "2")
    code, output = finish(rerun)
    assert code == 0, output
    check_outputs(workflow.path, COUNT, STEPS)
    check_never_two_at_once(workflow.path)


DAEMONS = {
    "nohup": "nohup sleep 300 >/dev/null 2>&1 &",
    "setsid": "setsid sleep 300 >/dev/null 2>&1 &",
    "subshell": "(sleep 300 >/dev/null 2>&1 &);",
    "double-fork-setsid": "(setsid sh -c 'sleep 300 & ' >/dev/null 2>&1 &);",
}


@pytest.mark.parametrize("daemon", list(DAEMONS))
def test_daemons_a_job_starts_end_with_it(tmp_path: Path, no_leftovers: str, daemon: str) -> None:
    (tmp_path / "Snakefile").write_text(
        'rule all:\n    input: "done.txt", "later.txt"\n'
        f'rule d:\n    output: "done.txt"\n'
        f'    shell: "{DAEMONS[daemon]} sleep 0.5; echo ok > {{output}}"\n'
        # a later job, so that the run goes on after the daemon's job ended
        'rule later:\n    input: "done.txt"\n    output: "later.txt"\n'
        f'    shell: "sleep 6; echo {no_leftovers} > {{output}}"\n'
    )
    env = Workflow(tmp_path, no_leftovers).env()
    proc = subprocess.Popen(
        [str(VENV_BIN / "snakemake"), "--executor", "dask-slurm", "--jobs", "2"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    done = tmp_path / "done.txt"
    eventually(
        "done.txt", done.exists, 60, check=still_running(proc, lambda: proc.communicate()[0])
    )
    # The worker looks for orphans of finished jobs every second; they are gone while the
    # run goes on (its end would stop them anyway).
    eventually(
        f"{daemon}: the job's daemon ended while the run goes on",
        lambda: not sleeping_in(tmp_path),
        5,
        check=still_running(proc, lambda: proc.communicate()[0]),
    )
    code, output = finish(proc)
    assert code == 0, output
