"""Growing the farm with worker jobs, on the project's SLURM test cluster (n1 4 CPUs, n2 4
CPUs, n3 8 CPUs): inside a one-node allocation (worker jobs take the other nodes), from the
login side with no allocation at all (``--dask-slurm-cluster sbatch``), a worker job that
cannot start, a partition that does not exist, a worker job scancelled under the run, and
idle worker jobs retired before the workflow ends. Every output's content is checked, and
after every test nothing is left in squeue and no process of ours is alive."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.appenders import lost_lines
from tests.conftest import VENV_BIN
from tests.waiting import eventually, still_running

if TYPE_CHECKING:
    from tests.slurm_cluster.fixtures import SlurmTestCluster

pytestmark = [pytest.mark.slurm, pytest.mark.e2e]

SNAKEMAKE = str(VENV_BIN / "snakemake")

# Each job writes its output slowly (a line a second), then the node it ran on. Literal
# shell commands: they run the direct way (no Snakemake started per job).
FARM = r"""
N = int(config.get("count", 40))

rule all:
    input: expand("out/{i}.txt", i=range(N)), "tail.txt"

rule task:
    output: "out/{i}.txt"
    params: seconds=config.get("seconds", 3)
    shell:
        "for k in $(seq 1 {params.seconds}); do echo $k >> {output}; sleep 1; done; "
        "echo node=$SLURMD_NODENAME >> {output}"

# Runs after every task, alone: long enough for idle worker jobs to be retired.
rule tail:
    input: expand("out/{i}.txt", i=range(N))
    output: "tail.txt"
    params: seconds=config.get("tail", 0)
    shell: "sleep {params.seconds}; echo tail > {output}"
"""


def write_farm(workdir: Path) -> Path:
    (workdir / "Snakefile").write_text(FARM)
    return workdir


def check_outputs(workdir: Path, count: int, seconds: int) -> Counter[str]:
    """Every output complete and written once; how many each node wrote."""
    nodes: Counter[str] = Counter()
    expected = [str(k) for k in range(1, seconds + 1)]
    for i in range(count):
        lines = (workdir / "out" / f"{i}.txt").read_text().splitlines()
        assert lines[:-1] == expected, f"out/{i}.txt is wrong: {lines}"
        assert lines[-1].startswith("node="), f"out/{i}.txt is wrong: {lines}"
        nodes[lines[-1].removeprefix("node=")] += 1
    assert (workdir / "tail.txt").read_text() == "tail\n"
    return nodes


def finished_on_nodes(workdir: Path) -> Counter[str]:
    """How many outputs each node has finished so far (a finished one ends ``node=``)."""
    nodes: Counter[str] = Counter()
    for path in (workdir / "out").glob("*.txt") if (workdir / "out").exists() else []:
        last = path.read_text().rstrip("\n").rpartition("\n")[2]
        if last.startswith("node="):
            nodes[last.removeprefix("node=")] += 1
    return nodes


def snakemake_argv(*args: str) -> list[str]:
    return [SNAKEMAKE, "--executor", "dask-slurm", "--jobs", "100", *args]


def start(
    cluster: SlurmTestCluster, workdir: Path, token: str, argv: list[str]
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        argv,
        cwd=workdir,
        env={**cluster.env, "DASK_SLURM_TEST_TOKEN": token},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def finish(proc: subprocess.Popen[str], cluster: SlurmTestCluster, timeout: float) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
        return out
    finally:
        kill(proc, cluster)


def kill(proc: subprocess.Popen[str], cluster: SlurmTestCluster) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        cluster.cancel_all()


def our_jobs(cluster: SlurmTestCluster) -> list[str]:
    return [f"{j.job_id} {j.name} {j.state}" for j in cluster.squeue_jobs()]


def jobs_left(cluster: SlurmTestCluster, within: float = 30.0) -> list[str]:
    """The jobs SLURM still lists ``within`` seconds from now (at once, if none).

    A run's end is not SLURM's: the test's own allocation, and a worker job the run
    cancelled, stay COMPLETING for a moment while slurmd ends their steps and epilog, so an
    immediate ``squeue`` can list them (CI, 2026-12-02: ``29 pytest-salloc-… COMPLETING``).
    What a run really left behind is still there after the bound."""
    deadline = time.monotonic() + within
    left = our_jobs(cluster)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = our_jobs(cluster)
    return left


def on_one_node(cluster: SlurmTestCluster, workdir: Path, token: str, argv: list[str]) -> str:
    """Run ``argv`` inside ``salloc -N1 -w n1 --exclusive`` (4 CPUs); its output, once it
    succeeded."""
    proc = cluster.salloc(
        ["-N1", "-w", "n1", "--exclusive", f"--chdir={workdir}", "--time=5"],
        argv,
        timeout=240,
        env_extra={"DASK_SLURM_TEST_TOKEN": token},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    return out


def test_grows_inside_a_one_node_allocation(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str
) -> None:
    workdir = write_farm(tmp_path)
    argv = snakemake_argv(
        "--dask-slurm-worker-jobs", "2", "--config", "count=40", "seconds=3", "tail=0"
    )
    out = on_one_node(slurm_cluster, workdir, no_leftovers, argv)
    assert re.search(r"submitted worker job\(s\) \d+, \d+", out), out
    assert re.search(r"worker job \d+: 1 worker\(s\) joined \(j\d+-n[23]\)", out), out
    nodes = check_outputs(workdir, 40, 3)
    assert set(nodes) == {"n1", "n2", "n3"}, nodes
    assert re.search(r"worker jobs: 2 submitted, 2 ran", out), out
    assert not (left := jobs_left(slurm_cluster)), left


def test_sbatch_mode_from_the_login_side_with_a_heterogeneous_worker_job(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str
) -> None:
    """One worker job of all three nodes (4, 4 and 8 CPUs): two srun steps, like an
    allocation; the farm runs on worker jobs only."""
    workdir = write_farm(tmp_path)
    argv = snakemake_argv(
        "--dask-slurm-cluster", "sbatch", "--dask-slurm-worker-jobs", "1",
        "--dask-slurm-worker-job-nodes", "3",
        "--config", "count=48", "seconds=2", "tail=0",
    )  # fmt: skip
    out = finish(start(slurm_cluster, workdir, no_leftovers, argv), slurm_cluster, 240)
    assert "dask-slurm: sbatch (requested with --dask-slurm-cluster)" in out, out
    joined = re.search(r"worker job (\d+): 3 worker\(s\) joined \(j\d+-n1, j\d+-n2, j\d+-n3\)", out)
    assert joined, out
    nodes = check_outputs(workdir, 48, 2)
    assert set(nodes) == {"n1", "n2", "n3"}, nodes
    job = joined.group(1)
    logs = (workdir / ".snakemake/dask-slurm/logs").iterdir()
    steps = sorted(p.name for p in logs if p.name.startswith(f"worker-job-{job}-workers-"))
    assert len(steps) == 2, steps
    assert steps[0].endswith("-4cpus.log") and steps[1].endswith("-8cpus.log"), steps
    assert not (left := jobs_left(slurm_cluster)), left


def test_a_worker_job_that_cannot_start_is_cancelled_at_the_end(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str
) -> None:
    """Inside a one-node allocation a worker job of three nodes can never start (only two
    are free): the run completes on its own node, and the pending job is cancelled."""
    workdir = write_farm(tmp_path)
    argv = snakemake_argv(
        "--dask-slurm-worker-jobs", "1", "--dask-slurm-worker-job-nodes", "3",
        "--config", "count=24", "seconds=2", "tail=0",
    )  # fmt: skip
    out = on_one_node(slurm_cluster, workdir, no_leftovers, argv)
    assert re.search(r"submitted worker job\(s\) \d+ ", out), out
    assert set(check_outputs(workdir, 24, 2)) == {"n1"}
    assert re.search(r"worker jobs: 1 submitted, 0 ran", out), out
    assert not (left := jobs_left(slurm_cluster)), left
    # SLURM's backfill may keep nodes "planned" for the cancelled job until its next pass.
    assert slurm_cluster.wait_until_quiet(45), slurm_cluster.node_states()


def test_a_partition_that_does_not_exist_fails_at_start_up(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str
) -> None:
    workdir = write_farm(tmp_path)
    argv = snakemake_argv(
        "--dask-slurm-cluster", "sbatch", "--dask-slurm-worker-job-partition", "nosuch",
        "--config", "count=2", "seconds=1",
    )  # fmt: skip
    began = time.monotonic()
    out = finish(start(slurm_cluster, workdir, no_leftovers, argv), slurm_cluster, 120)
    assert time.monotonic() - began < 60, out
    assert "invalid partition specified: nosuch" in out, out  # SLURM's own words
    assert "--dask-slurm-worker-job-partition nosuch" in out.split("The options were:")[-1], out
    assert not (workdir / "out").exists()
    assert not (left := jobs_left(slurm_cluster)), left


def test_scancel_of_a_running_worker_job_loses_no_job(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str
) -> None:
    """Two worker jobs; one is scancelled while its jobs write their outputs: those jobs
    run again elsewhere (a new worker job comes), and every output is whole."""
    workdir = write_farm(tmp_path)
    argv = snakemake_argv(
        "--dask-slurm-cluster", "sbatch", "--dask-slurm-worker-jobs", "2",
        "--dask-slurm-worker-job-cpus", "4",
        "--config", "count=40", "seconds=4", "tail=0",
    )  # fmt: skip
    proc = start(slurm_cluster, workdir, no_leftovers, argv)
    victim = None
    try:
        deadline = time.monotonic() + 120
        while victim is None and time.monotonic() < deadline and proc.poll() is None:
            running = [j for j in slurm_cluster.squeue_jobs() if j.state == "RUNNING"]
            # A worker job alone on its node that has finished jobs there, so its worker
            # is in the farm and running jobs (not one whose worker is just joining).
            done_on = finished_on_nodes(workdir)
            alone = [j for j in running if [k.nodes for k in running].count(j.nodes) == 1]
            busy = [j for j in alone if done_on.get(j.nodes, 0) >= 2]
            if len(running) == 2 and busy:
                victim = busy[0].job_id
            time.sleep(0.2)
    finally:
        if victim is None:
            kill(proc, slurm_cluster)
    assert victim is not None, "the worker jobs never ran"
    time.sleep(1.5)  # their jobs are half-way through writing
    slurm_cluster.run(["scancel", victim])
    out = finish(proc, slurm_cluster, 240)
    assert proc.returncode == 0, out
    assert f"worker job {victim} ended under the run" in out, out
    # One line for its worker: the jobs it ran (at most its 4 CPUs' worth) run again, each
    # told as running in the detail log, the others as waiting.
    lines = lost_lines(out, f"j{victim}-n\\d")
    assert len(lines) == 1 and 1 <= lines[0][0] <= 4, (lines, out)
    detail = (workdir / ".snakemake/dask-slurm/logs/plugin.log").read_text()
    assert detail.count(f"was running on j{victim}-") == lines[0][0], detail
    assert detail.count(f"was waiting, not started, on j{victim}-") == lines[0][1], detail
    check_outputs(workdir, 40, 4)
    assert not (left := jobs_left(slurm_cluster)), left


def test_idle_worker_jobs_leave_before_the_workflow_ends(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str
) -> None:
    """A backlog that empties, then one long job: the idle worker jobs are retired (their
    workers leave through the scheduler) while it runs, and no job is lost."""
    workdir = write_farm(tmp_path)
    argv = snakemake_argv(
        "--dask-slurm-worker-jobs", "2", "--dask-slurm-worker-job-idle", "3",
        "--config", "count=40", "seconds=2", "tail=25",
    )  # fmt: skip
    out = on_one_node(slurm_cluster, workdir, no_leftovers, argv)
    # One of them may run the tail job itself, and then it is not idle.
    retired = re.findall(r"worker job (\d+) retired: idle", out)
    assert retired, out
    nodes = check_outputs(workdir, 40, 2)
    assert {"n2", "n3"} & set(nodes), nodes
    # Retired while the tail job still ran: the run's end found nothing to cancel.
    assert re.search(rf"worker jobs: 2 submitted, 2 ran, .*{len(retired)} retired", out), out
    assert "Removing output files" not in out, out
    assert not (left := jobs_left(slurm_cluster)), left


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_no_worker_job_outlives_a_stopped_or_killed_snakemake(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str, sig: signal.Signals
) -> None:
    """SIGTERM: Snakemake cancels its worker jobs (one scancel) and exits within seconds.
    SIGKILL: nothing can cancel them, but their workers lose the scheduler (it exits when
    its owner is gone) and the jobs end by themselves."""
    workdir = write_farm(tmp_path)
    argv = snakemake_argv(
        "--dask-slurm-cluster", "sbatch", "--dask-slurm-worker-jobs", "2",
        "--config", "count=80", "seconds=3",
    )  # fmt: skip
    proc = start(slurm_cluster, workdir, no_leftovers, argv)
    try:
        eventually(
            "a worker job running beside the allocation",
            lambda: len([j for j in slurm_cluster.squeue_jobs() if j.state == "RUNNING"]) >= 2,
            90,
            interval=0.2,
            check=still_running(proc),
        )
        time.sleep(2)  # jobs running on them
        proc.send_signal(sig)
        began = time.monotonic()
        proc.communicate(timeout=60)
        assert not (left := jobs_left(slurm_cluster, within=90)), left
        if sig == signal.SIGTERM:
            assert time.monotonic() - began < 20
    finally:
        kill(proc, slurm_cluster)


@pytest.mark.timeout(420)
def test_a_farm_longer_than_its_worker_jobs_limit_completes_as_they_come_and_go(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str
) -> None:
    """From the login side, on worker jobs of --time=2 (each lands 30 s before its end):
    a farm of about three minutes completes; each worker job lands and is replaced in
    time; no job is killed by SLURM's time limit, none is stopped at a worker job's limit
    (its rule's duration is learned long before the first landing); every output whole;
    nothing left in squeue; the summary's counts match what was said."""
    workdir = write_farm(tmp_path)
    argv = snakemake_argv(
        "--dask-slurm-cluster", "sbatch", "--dask-slurm-worker-jobs", "2",
        "--dask-slurm-worker-job-cpus", "4", "--dask-slurm-worker-job-time", "2",
        "--config", "count=120", "seconds=10", "tail=0",
    )  # fmt: skip
    out = finish(start(slurm_cluster, workdir, no_leftovers, argv), slurm_cluster, 400)
    assert "worker jobs have 120 s each: each lands 30 s before its end" in out, out
    check_outputs(workdir, 120, 10)
    submitted = re.findall(r"submitted worker job\(s\) ([\d, ]+) \(", out)
    replaced = re.findall(r"worker job (\d+) to replace (\d+)", out)
    landed = re.findall(
        r"worker job (\d+) lands, \d+ s before its time limit: .* (\d+) that could not are "
        r"stopped .*, (\d+) not started go to other workers",
        out,
    )
    assert replaced and landed, out
    # Every job that landed had its successor before it landed.
    assert {old for _, old in replaced} >= {job for job, _, _ in landed}, out
    ids = [i.strip() for ids in submitted for i in ids.split(",")] + [new for new, _ in replaced]
    summary = re.search(
        r"worker jobs: (\d+) submitted, (\d+) ran, for \d+ node-minute\(s\) in all \((.*)\)"
        r".*; (\d+) job\(s\) stopped at a worker job's time limit \(run again elsewhere\), "
        r"(\d+) moved unstarted off landing ones",
        out,
    )
    assert summary, out
    assert int(summary[1]) == int(summary[2]) == len(ids), (ids, out)
    assert f"{len(landed)} landed" in summary[3], out
    assert int(summary[4]) == sum(int(s) for _, s, _ in landed) == 0, out
    assert int(summary[5]) == sum(int(m) for _, _, m in landed), out
    # Every stop was the plugin's: no worker job ended under the run (its time limit),
    # none was cancelled at its end, and SLURM never signalled one.
    assert "ended under the run" not in out and "timeout" not in summary[3], out
    assert "before its time limit: cancelled" not in out, out
    logs = workdir / ".snakemake/dask-slurm/logs"
    for job_id in ids:
        said = (logs / f"worker-job-{job_id}.out").read_text()
        assert "DUE TO TIME LIMIT" not in said and "CANCELLED" not in said, said
    assert "Removing output files" not in out, out
    assert not (left := jobs_left(slurm_cluster)), left
