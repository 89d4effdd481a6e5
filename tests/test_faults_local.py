"""Faults as users meet them, on the embedded local cluster: a worker killed outright
(with and without restarts), a job that kills its worker every time, the scheduler killed,
jobs that start daemons. Every output's content is checked afterwards, and that no two
copies of a job ever ran at once."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.appenders import (
    alive,
    check_never_two_at_once,
    check_outputs,
    children,
    copies,
    holding,
    interrupted,
    kill_worker_when_busy,
    lost_lines,
    sleeping_in,
    started,
    worker_pids,
)
from tests.conftest import VENV_BIN, WORKFLOWS, Workflow, live_processes
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
def test_a_killed_worker_under_a_batch_reruns_only_its_jobs_that_had_not_ended(
    workflow: Workflow,
) -> None:
    """Two workers of 4 CPUs each take the 8 jobs as two batches of 4 (several jobs per
    Dask task; a batch never spans workers). Two jobs of one worker's batch are let end;
    then that worker is killed -9: its two held jobs run again elsewhere, the two that
    ended are not run again."""
    path = workflow.path
    holds = path / "holds"
    holds.mkdir()
    for i in range(COUNT):
        (holds / str(i)).touch()
    proc = start(
        workflow, "--dask-slurm-workers", "2", "--dask-slurm-cpus", "8",
        config=(f"hold_dir={holds}",),
    )  # fmt: skip
    try:
        eventually("every job started", lambda: started(path) == COUNT, 120)
        victim = the_worker(workflow, "local-0")
        shells = set(children(victim))
        mine = sorted(c.job for runs in copies(path).values() for c in runs if c.pid in shells)
        assert len(mine) == 4, (mine, shells)  # its batch: four of the eight
        let_end, held = mine[:2], mine[2:]
        for i in let_end:
            (holds / str(i)).unlink()

        def ended() -> set[int]:
            return {c.job for runs in copies(path).values() for c in runs if c.ended}

        eventually("two of its batch ended", lambda: ended() >= set(let_end), 60)
        _worker, its_jobs = kill_worker_when_busy(proc, path, lambda: victim, jobs=COUNT)
        time.sleep(1.0)
        assert not alive(its_jobs), "the killed worker's jobs outlived it by a second"
    finally:
        shutil.rmtree(holds, ignore_errors=True)  # every job may end now
    code, output = finish(proc)
    assert code == 0, output
    assert interrupted(path) == set(held), (interrupted(path), held)
    assert lost_lines(output, "local-0") == [(2, 0)], output
    runs = copies(path)
    assert [len(runs[i]) for i in let_end] == [1, 1], runs  # ended: never run again
    assert [len(runs[i]) for i in held] == [2, 2], runs  # cut short, then run again
    assert "go several per Dask task" in workflow.read(".snakemake/dask-slurm/logs/plugin.log")
    check_outputs(path, COUNT, STEPS)
    check_never_two_at_once(path)


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
    print(f"Snakemake ended {took:.2f} s after the scheduler was killed")
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


# --------------------------------------------------------------------------- a full disk

#: Each step writes a line of 2 KB, so that a job's output grows by pages and meets the
#: full disk within a few steps (a file's last page takes small writes after the disk is
#: full).
DISK_STEPS = 12
DISK_CONFIG = ("count=8", f"steps={DISK_STEPS}", "pause=0.25", "pad=2000")


@contextlib.contextmanager
def small_disk(path: Path) -> Iterator[Path]:
    """A tmpfs of 8 MB at ``path``, unmounted on leaving (lazily if still busy)."""
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], check=True)


def fill(disk: Path) -> Path:
    """Fill the disk to the last byte; the filler, to remove once the run is over."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as f:
        for size in (1 << 16, 4096, 1):
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"x" * size)
    return filler


def run_into_a_full_disk(disk: Path, token: str, executor: list[str]) -> tuple[int, str, float]:
    """Snakemake on the appenders workflow in ``disk``; once 2 jobs started, the disk is
    filled. Its exit code, output, and how long after the fill it ended."""
    shutil.copy(WORKFLOWS / "appenders/Snakefile", disk)
    config = ["--config", f"token={token}", *DISK_CONFIG]
    env = Workflow(disk, token).env()
    proc = subprocess.Popen(
        [str(VENV_BIN / "snakemake"), *executor, *config], cwd=disk, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    eventually("2 jobs started", lambda: started(disk) >= 2, 60, 0.1, still_running(proc))
    filler = fill(disk)
    full = time.monotonic()
    code, output = finish(proc, timeout=60)
    took = time.monotonic() - full
    filler.unlink()
    return code, output, took


def incomplete(disk: Path, token: str) -> list[str]:
    """The outputs Snakemake itself (a dry run) refuses as incomplete."""
    dry = subprocess.run(
        [str(VENV_BIN / "snakemake"), "-n", "--config", f"token={token}", *DISK_CONFIG],
        cwd=disk, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    _, listed, rest = (dry.stdout + dry.stderr).partition("Incomplete files:\n")
    return sorted(line for line in rest.splitlines() if line.startswith("out/")) if listed else []


def left_behind(disk: Path, token: str) -> tuple[list[str], list[str]]:
    """The outputs left, and those of them Snakemake knows as incomplete; every one left
    that it does not is whole, from one copy of its job."""
    left = sorted(f"out/{p.name}" for p in (disk / "out").glob("*.txt"))
    marked = incomplete(disk, token)
    runs = copies(disk)
    for name in set(left) - set(marked):
        i = int(Path(name).stem)
        lines = (disk / name).read_text().splitlines()
        pid = int(lines[0].split()[2]) if lines else -1
        whole = any(c.pid == pid and c.ended for c in runs[i])
        assert len(lines) == DISK_STEPS and whole, f"{name}: partial, not marked incomplete"
    return left, marked


def test_a_full_disk_ends_the_run_at_once_and_every_partial_output_is_redone(
    tmp_path: Path, no_leftovers: str
) -> None:
    """The working directory's file system fills up while jobs write: the run ends within
    seconds, saying so, and leaves what Snakemake's local executor leaves beside it: every
    partial output marked incomplete, so that the next run redoes it."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    ways = {"plugin": ["--executor", "dask-slurm", "--jobs", "4"], "local": ["--cores", "4"]}
    left = {}
    for way, executor in ways.items():
        with small_disk(tmp_path / way) as disk:
            code, output, took = run_into_a_full_disk(disk, no_leftovers, executor)
            assert code == 1 and "[Errno 28] No space left on device" in output, output
            assert took < 10, f"{way}: ended {took:.1f} s after the disk was full"
            print(f"{way}: ended {took:.2f} s after the disk was full")
            left[way] = left_behind(disk, no_leftovers)
            assert left[way][1], f"{way}: no partial output marked incomplete: {left[way]}"
            if way == "plugin":
                again = Workflow(disk, no_leftovers).snakemake(
                    "--jobs",
                    "4",
                    "--rerun-incomplete",
                    "--config",
                    f"token={no_leftovers}",
                    *DISK_CONFIG,
                )
                assert again.returncode == 0, again
                check_outputs(disk, 8, DISK_STEPS, pad=2000)
                check_never_two_at_once(disk)
    print(left)


# --------------------------------------------------------------------------- the submit host


def snakemake_side(workflow: Workflow, proc: subprocess.Popen[str]) -> list[int]:
    """Snakemake and the scheduler it started: what runs on the submit host in srun mode."""
    scheduler = [pid for pid, cmd in live_processes("no-token", str(workflow.path))
                 if "distributed.cli.dask_scheduler" in cmd]  # fmt: skip
    assert len(scheduler) == 1, scheduler
    return [proc.pid, *scheduler]


@pytest.mark.workflow("appenders")
def test_a_submit_host_that_gives_no_cpu_for_20_s_costs_nothing(workflow: Workflow) -> None:
    """Snakemake and its scheduler stopped (SIGSTOP) for 20 s while jobs run, as on a login
    node so overloaded they get no CPU: shorter than the worker-ttl (30 s), so no worker is
    dropped and the run completes; every output whole, never two copies."""
    proc = start(workflow, "--dask-slurm-workers", "2", config=("count=4", "steps=20"))
    eventually("2 jobs started", lambda: started(workflow.path) >= 2, 60, 0.1, still_running(proc))
    side = snakemake_side(workflow, proc)
    for pid in side:
        os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(20)
    finally:
        for pid in side:
            os.kill(pid, signal.SIGCONT)
    code, output = finish(proc)
    assert code == 0, output
    assert not lost_lines(output, "local-[01]") and "stopped answering" not in output, output
    check_outputs(workflow.path, 4, 20)
    check_never_two_at_once(workflow.path)


@pytest.mark.workflow("appenders")
def test_snakemake_killed_outright_leaves_nothing_running_and_a_rerun_redoes_the_rest(
    workflow: Workflow,
) -> None:
    """kill -9 of Snakemake mid-run: its scheduler notices its owner is gone and closes,
    the workers end their jobs and exit, within seconds; the partial outputs are what
    Snakemake knows as incomplete; --unlock and --rerun-incomplete complete the run."""
    config = ("--config", f"token={workflow.token}", f"count={COUNT}", "steps=40", "pause=0.1")
    proc = start(workflow, "--dask-slurm-workers", "2", config=config[3:])
    eventually("2 jobs started", lambda: started(workflow.path) >= 2, 60, 0.1, still_running(proc))
    proc.kill()
    killed = time.monotonic()
    finish(proc)
    eventually("nothing of the run left", lambda: not live_processes(workflow.token,
               str(workflow.path)), 15)  # fmt: skip
    took = time.monotonic() - killed
    print(f"every process of the run ended {took:.2f} s after Snakemake was killed")
    assert took < 5, f"the run's processes outlived Snakemake by {took:.1f} s"
    partial = sorted(f"out/{p.name}" for p in (workflow.path / "out").glob("*.txt"))
    dry = subprocess.run(
        [str(VENV_BIN / "snakemake"), "-n", *config], cwd=workflow.path, capture_output=True,
        text=True, timeout=60, check=False,
    )  # fmt: skip
    listed = (dry.stdout + dry.stderr).partition("Incomplete files:\n")[2].split()
    assert partial and sorted(listed) == partial, (partial, dry.stdout + dry.stderr)
    assert workflow.snakemake("--unlock", *config).returncode == 0
    again = workflow.snakemake("--jobs", "4", "--rerun-incomplete", *config)
    assert again.returncode == 0, again
    check_outputs(workflow.path, COUNT, 40)
