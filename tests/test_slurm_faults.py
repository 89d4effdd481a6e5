"""Faults inside a real SLURM allocation on the project's test cluster (nodes n1, n2, n3):
a worker killed outright (with and without restarts), a worker killed together with its
supervisor, the scheduler killed, jobs that start daemons. Every output is checked, and
that no two copies of a job ever ran at once. The nodes share this machine's process
table, so the test can find and kill a node's worker like an out-of-memory killer would.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from snakemake_executor_plugin_dask_slurm.worker import proctree
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
    release,
    sleeping_in,
    started,
    worker_pids,
)
from tests.conftest import VENV_BIN, WORKFLOWS, live_processes
from tests.slurm_cluster import breakage
from tests.test_warm import (
    FAULTS_ARGS,
    HANGS_ENV,
    check_faults,
    check_hangs,
    drive_faults,
    drive_hangs,
)
from tests.waiting import eventually, still_running

if TYPE_CHECKING:
    from tests.slurm_cluster.fixtures import SlurmTestCluster

pytestmark = [pytest.mark.slurm, pytest.mark.e2e]

SNAKEMAKE = str(VENV_BIN / "snakemake")
COUNT, STEPS = 12, 5


@contextmanager
def snakemake_in_salloc(
    cluster: SlurmTestCluster,
    workdir: Path,
    token: str,
    *args: str,
    steps: int = STEPS,
    config: tuple[str, ...] = (),
    salloc: tuple[str, ...] = (),
) -> Iterator[subprocess.Popen[str]]:
    """Snakemake on the appenders workflow inside ``salloc -N3 <salloc>``, running in the
    background; on leaving, the allocation is cancelled if it still runs."""
    with cluster.salloc_background(
        f"faults-{token}",
        ["-N3", "--exclusive", "--time=5", f"--chdir={workdir}", *salloc],
        [SNAKEMAKE, "--executor", "dask-slurm", "--jobs", "30",
         "--config", f"token={token}", f"count={COUNT}", f"steps={steps}", *config, *args],
        {"DASK_SLURM_TEST_TOKEN": token},
    ) as proc:  # fmt: skip
        yield proc


def finish(proc: subprocess.Popen[str], timeout: float = 180) -> tuple[int, str]:
    output, _ = proc.communicate(timeout=timeout)
    return proc.returncode, output


def appenders(tmp_path: Path) -> Path:
    return Path(shutil.copytree(WORKFLOWS / "appenders", tmp_path / "appenders"))


def node_worker(workdir: Path, node: str) -> int:
    found = worker_pids(node, str(workdir))
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize("restarts", [False, True], ids=["no-restart", "restarted"])
def test_a_killed_worker_on_a_node_costs_no_output(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str, restarts: bool
) -> None:
    workdir = appenders(tmp_path)
    args = ("--dask-slurm-nanny",) if restarts else ()
    # No job ends while the worker is killed: its running jobs are exactly those whose copy
    # is cut short (a job ending just then was counted running, not interrupted).
    with (
        holding(workdir) as hold,
        snakemake_in_salloc(slurm_cluster, workdir, no_leftovers, *args, config=(hold,)) as proc,
    ):
        _, its_jobs = kill_worker_when_busy(proc, workdir, lambda: node_worker(workdir, "n3"), 4)
        time.sleep(1.0)
        assert not alive(its_jobs), "the killed worker's jobs outlived it by a second"
        release(workdir)
        code, output = finish(proc)
    assert code == 0, output
    lines = lost_lines(output, "n3")
    assert len(lines) == 1 and lines[0][0] == len(interrupted(workdir)), (lines, output)
    detail = (workdir / ".snakemake/dask-slurm/logs/plugin.log").read_text()
    assert "was running on n3 when that worker died" in detail, detail
    check_outputs(workdir, COUNT, STEPS)
    check_never_two_at_once(workdir)
    record = (workdir / ".snakemake/dask-slurm/workers").glob("n3-*.json")
    assert any('"signal": 9' in path.read_text() for path in record), "no supervisor record"


def test_a_worker_that_stops_answering_on_a_node_is_ended_in_seconds(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str
) -> None:
    """kill -STOP of n3's worker (a node hanging on its filesystem looks the same): Dask
    drops it after the worker-ttl, an srun step on n3 ends it, its supervisor ends its jobs
    and records it, and they run again elsewhere; one line; never two copies at once."""
    workdir = appenders(tmp_path)
    ttl = ("--dask-slurm-worker-ttl", "5")
    # Its jobs cannot end while it is stopped (they would end by themselves within the ttl,
    # and one whose start was reported would be counted running, not interrupted).
    with (
        holding(workdir) as hold,
        snakemake_in_salloc(slurm_cluster, workdir, no_leftovers, *ttl, config=(hold,)) as proc,
    ):
        worker, its_jobs = kill_worker_when_busy(
            proc, workdir, lambda: node_worker(workdir, "n3"), 4, sig=signal.SIGSTOP
        )
        stopped = time.monotonic()
        eventually("the stopped worker ended", lambda: not alive([worker]), 60)
        assert time.monotonic() - stopped < 30, "not ended within the ttl and a step"
        # Not at once: the worker reads as gone from the moment it is a zombie (end_worker's
        # SIGKILL); only then does its supervisor reap it, scan and kill what its jobs left,
        # so they end a few milliseconds after it (more under load): 1 s bounds that lag.
        eventually("its jobs ended with it", lambda: not alive(its_jobs), 1.0)
        release(workdir)
        code, output = finish(proc)
    assert code == 0, output
    lines = [line for line in output.splitlines() if "stopped answering" in line]
    assert len(lines) == 1 and "an srun step on n3: worker pid" in lines[0], output
    ((running, _waiting),) = lost_lines(output, "n3")
    assert running == len(interrupted(workdir)), output
    check_outputs(workdir, COUNT, STEPS)
    check_never_two_at_once(workdir)


def test_a_worker_killed_with_its_supervisor_is_swept_by_srun(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str
) -> None:
    """Nothing on the node records the death: the plugin ends the jobs' processes with an
    srun step on that node (after waiting for a record), and only then runs them again."""
    workdir = appenders(tmp_path)

    def supervisor_then_worker() -> int:
        worker = node_worker(workdir, "n2")
        with open(f"/proc/{worker}/stat") as f:
            supervisor = int(f.read().rsplit(")", 1)[1].split()[1])
        os.kill(supervisor, signal.SIGKILL)
        return worker

    with snakemake_in_salloc(slurm_cluster, workdir, no_leftovers, steps=20) as p:
        kill_worker_when_busy(p, workdir, supervisor_then_worker, 4)
        code, output = finish(p)
    assert code == 0, output
    assert re.search(r"an srun step on n2 ended \d+ process\(es\) of them", output), output
    check_never_two_at_once(workdir)


def test_a_killed_scheduler_ends_the_run_and_its_steps(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str
) -> None:
    workdir = appenders(tmp_path)
    with snakemake_in_salloc(slurm_cluster, workdir, no_leftovers) as proc:
        eventually("3 jobs started", lambda: started(workdir) >= 3, 120, 0.1, still_running(proc))
        scheduler = [pid for pid, cmd in live_processes("no-token", str(workdir))
                     if "distributed.cli.dask_scheduler" in cmd]  # fmt: skip
        killed = time.monotonic()
        os.kill(scheduler[0], signal.SIGKILL)
        code, output = finish(proc, timeout=60)
        took = time.monotonic() - killed
    assert code != 0, output
    assert took < 10, f"Snakemake took {took:.1f} s to end after the scheduler died"
    assert "the Dask scheduler was killed by signal SIGKILL" in output, output
    assert output.count("the Dask cluster broke") == 1 and "Traceback" not in output, output
    with snakemake_in_salloc(slurm_cluster, workdir, no_leftovers) as rerun:
        code, output = finish(rerun)
    assert code == 0, output
    check_outputs(workdir, COUNT, STEPS)
    check_never_two_at_once(workdir)


def test_daemons_of_jobs_on_the_nodes_end_with_their_jobs(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str
) -> None:
    daemons = [
        "nohup sleep 300 >/dev/null 2>&1 &",
        "setsid sleep 300 >/dev/null 2>&1 &",
        "(sleep 300 >/dev/null 2>&1 &);",
        "(setsid sh -c 'sleep 300 & ' >/dev/null 2>&1 &);",
    ]
    rules = "".join(
        f'rule d{i}:\n    output: "d{i}.txt"\n    shell: "{d} sleep 0.5; echo ok > {{output}}"\n'
        for i, d in enumerate(daemons)
    )
    (tmp_path / "Snakefile").write_text(
        f'rule all:\n    input: "later.txt"\n{rules}'
        f"rule later:\n    input: {[f'd{i}.txt' for i in range(len(daemons))]}\n"
        f'    output: "later.txt"\n    shell: "sleep 7; echo {no_leftovers} > {{output}}"\n'
    )
    with slurm_cluster.salloc_background(
        f"daemons-{no_leftovers}",
        ["-N3", "--exclusive", "--time=5", f"--chdir={tmp_path}"],
        [SNAKEMAKE, "--executor", "dask-slurm", "--jobs", "10"],
        {"DASK_SLURM_TEST_TOKEN": no_leftovers},
    ) as proc:
        eventually(
            "every daemon's job done",
            lambda: all((tmp_path / f"d{i}.txt").exists() for i in range(len(daemons))),
            120,
            check=still_running(proc),
        )
        # Each worker looks for orphans of finished jobs every second; they are gone while
        # the run goes on (its end would stop them anyway).
        eventually(
            "the daemons ended on the nodes while the run goes on",
            lambda: not sleeping_in(tmp_path),
            5,
            check=still_running(proc),
        )
        code, output = finish(proc)
        assert code == 0, output


def test_faults_of_the_warm_path_on_the_nodes(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str
) -> None:
    """tests/test_warm.py's faults in a 3-node allocation: every node's warm process is
    killed under the jobs it runs."""
    workdir = Path(shutil.copytree(WORKFLOWS / "warm_faults", tmp_path / "wf"))
    with slurm_cluster.salloc_background(
        f"warm-{no_leftovers}",
        ["-N3", "--exclusive", "--time=5", f"--chdir={workdir}"],
        [SNAKEMAKE, "--executor", "dask-slurm", "--jobs", "10", *FAULTS_ARGS,
         f"token={no_leftovers}"],
        {"DASK_SLURM_TEST_TOKEN": no_leftovers},
    ) as proc:  # fmt: skip
        output = drive_faults(workdir, proc)
    check_faults(workdir, proc.returncode, output)


def test_a_stopped_zygote_or_primed_server_on_a_node(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str
) -> None:
    """tests/test_warm.py's stopped zygote and primed server, on a node of an allocation."""
    workdir = Path(shutil.copytree(WORKFLOWS / "warm_hangs", tmp_path / "wf"))
    with slurm_cluster.salloc_background(
        f"hang-{no_leftovers}",
        ["-N1", "--exclusive", "--time=5", f"--chdir={workdir}"],
        [SNAKEMAKE, "--executor", "dask-slurm", "--jobs", "4", "--dask-slurm-no-usage-report"],
        {"DASK_SLURM_TEST_TOKEN": no_leftovers, **HANGS_ENV},
    ) as proc:  # fmt: skip
        output, servers = drive_hangs(workdir, proc)
    check_hangs(workdir, proc.returncode, output, servers)


# --------------------------------------------------------------------------- the network,
# the controller: faults of SLURM's side (tests/slurm_cluster/breakage.py), issue 51.

CUT_SECONDS = 40.0
#: Steps of 0.5 s: each job writes its output for 40 s, longer than the ttl below, than
#: the cut, and than a cut node's copies live after it (~31 s), so that they are cut short.
LONG_STEPS = 80
TTL = ("--dask-slurm-worker-ttl", "10")


def finished_quietly(proc: subprocess.Popen[str], workdir: Path) -> tuple[int, str]:
    """Snakemake's exit code and output; then nothing of the run writes any more."""
    code, output = finish(proc)
    before = breakage.snapshot(workdir)
    time.sleep(3.0)
    assert breakage.snapshot(workdir) == before, "written after Snakemake exited"
    return code, output


def busy(proc: subprocess.Popen[str], workdir: Path, node: str) -> list[int]:
    """Once the run's jobs all started, the processes of ``node``'s worker (it runs one)."""

    def ready() -> list[int] | None:
        if started(workdir) < COUNT:
            return None
        worker = node_worker(workdir, node)
        if not children(worker):
            return None
        return [worker, *proctree.descendants([worker], proctree.scan())]

    return eventually(f"{node} busy", ready, 120, 0.1, still_running(proc))


def test_a_node_cut_off_for_40_s_costs_no_output(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str
) -> None:
    """n2's link down for 40 s (SlurmdTimeout is SLURM's 300 s: the allocation stays):
    its copies end while it is cut off (its worker's connection to the scheduler times
    out, ~31 s, and it ends its jobs), and only then run again elsewhere; never two
    copies; every output whole; one line; nothing written after Snakemake exits."""
    workdir = appenders(tmp_path)
    with snakemake_in_salloc(slurm_cluster, workdir, no_leftovers, *TTL, steps=LONG_STEPS) as p:
        on_n2 = busy(p, workdir, "n2")
        with breakage.link_cut(slurm_cluster, "n2"):
            cut = time.time()
            time.sleep(CUT_SECONDS)
        code, output = finished_quietly(p, workdir)
    assert code == 0, output
    runs = copies(workdir)
    cut_short = [c for job in runs.values() for c in job if not c.ended]
    assert cut_short and all(c.pid in on_n2 for c in cut_short), (cut_short, on_n2)
    ended = max(c.last for c in cut_short) - cut
    again = min(c.first for job in interrupted(workdir) for c in runs[job] if c.ended) - cut
    slurm_cluster.record_timing("cut node's copies ended after the cut", ended)
    slurm_cluster.record_timing("their reruns started after the cut", again)
    # They run again as soon as the node's supervisor recorded their end (0.5 s later), or,
    # if an srun step to end them was started first, once it reached the node (the link up).
    assert ended < CUT_SECONDS and again < CUT_SECONDS + 5, (ended, again)
    # Those it had not yet heard start there count as waiting ones moved.
    ((running, waiting),) = lost_lines(output, "n2")
    assert running + waiting == len(cut_short), output
    assert "broke" not in output and "has ended" not in output, output
    check_outputs(workdir, COUNT, LONG_STEPS)
    check_never_two_at_once(workdir)


def cut_past_slurmd_timeout(
    cluster: SlurmTestCluster, workdir: Path, token: str, salloc: tuple[str, ...]
) -> tuple[int, str, float]:
    """n2 cut off for 40 s while SlurmdTimeout is 10 s: SLURM sets it DOWN. Snakemake's
    exit code, output, and when it exited after the cut (or -1: after the link was up)."""
    took = -1.0
    with (
        breakage.slurmd_timeout(cluster, 10),
        snakemake_in_salloc(cluster, workdir, token, *TTL, steps=LONG_STEPS, salloc=salloc) as p,
    ):
        busy(p, workdir, "n2")
        with breakage.link_cut(cluster, "n2") as cut:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(CUT_SECONDS)
                took = time.monotonic() - cut
            time.sleep(max(0.0, cut + CUT_SECONDS - time.monotonic()))
        code, output = finished_quietly(p, workdir)
    breakage.wait_node_back(cluster, "n2")
    return code, output, took


def test_a_node_cut_off_past_slurmd_timeout_ends_the_allocation_in_one_line(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str
) -> None:
    """SLURM sets the silent node DOWN and ends the allocation (NODE_FAIL): the run says
    so in one line, within seconds of SLURM's word; every job fails, its output removed
    for good (the cut node's copies end before Snakemake exits)."""
    workdir = appenders(tmp_path)
    code, output, took = cut_past_slurmd_timeout(slurm_cluster, workdir, no_leftovers, ())
    slurm_cluster.record_timing("run ended after the cut", took)
    assert code != 0, output
    (line,) = [line for line in output.splitlines() if line.startswith("dask-slurm: the Dask")]
    assert re.search(r"SLURM allocation \d+ has ended \(state \w+, reason NodeDown\)", line), line
    assert "Traceback" not in output, output
    assert 0 < took < 45, f"the run ended {took:.1f} s after the cut"
    left = sorted(p.name for p in (workdir / "out").glob("*"))
    assert not left, f"outputs left (all their jobs failed): {left}\n{output}"


def test_a_node_cut_off_under_no_kill_leaves_the_run_to_the_others(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str
) -> None:
    """``salloc --no-kill``: SLURM takes the DOWN node out of the allocation and the run
    goes on and completes on the nodes left (n3: n1 shared its srun step with n2, which
    SLURM ends with the node); never two copies; every output whole."""
    workdir = appenders(tmp_path)
    salloc = ("--no-kill",)
    code, output, took = cut_past_slurmd_timeout(slurm_cluster, workdir, no_leftovers, salloc)
    assert code == 0 and took == -1.0, output
    assert "broke" not in output and "has ended" not in output, output
    assert len(lost_lines(output, "n2")) == 1, output
    check_outputs(workdir, COUNT, LONG_STEPS)
    check_never_two_at_once(workdir)


PAUSE_SECONDS = 60.0


def test_a_controller_stopped_for_60_s_mid_run_costs_nothing(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str
) -> None:
    """slurmctld stopped (SIGSTOP) for 60 s mid-run, longer than any timeout the plugin
    has towards SLURM (30 s): jobs keep starting and ending meanwhile, no false "allocation
    ended", the run completes; every output whole."""
    workdir = appenders(tmp_path)
    count = 240  # more than the farm ends in the pause (about 170 in 60 s): it goes on
    config = (f"count={count}",)
    with snakemake_in_salloc(slurm_cluster, workdir, no_leftovers, steps=10, config=config) as p:
        eventually("3 jobs started", lambda: started(workdir) >= 3, 120, 0.1, still_running(p))
        with breakage.controller_stopped(slurm_cluster):
            before = ended_jobs(workdir)
            time.sleep(PAUSE_SECONDS)
            during = ended_jobs(workdir) - before
            assert p.poll() is None, "the run ended while the controller was stopped"
        code, output = finished_quietly(p, workdir)
    assert code == 0, output
    assert "broke" not in output and "has ended" not in output, output
    print(f"{during} jobs ended while slurmctld was stopped for {PAUSE_SECONDS:g} s")
    assert during >= 48, f"only {during} jobs ended while the controller was stopped"
    check_outputs(workdir, count, 10)
    check_never_two_at_once(workdir)


def ended_jobs(workdir: Path) -> int:
    return (workdir / "events.log").read_text().count("end ")
