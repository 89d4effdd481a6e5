"""The plugin inside real SLURM allocations on the project's test cluster.

Three nodes of 4, 4 and 8 CPUs, each its own network namespace and hostname. After every
test: no process of ours alive (no_leftovers), no job or step in squeue (slurm_cluster),
no scheduler file.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.conftest import VENV_BIN, WORKFLOWS, Run, wait_until_gone
from tests.waiting import eventually, still_running

if TYPE_CHECKING:
    from tests.slurm_cluster.fixtures import SlurmTestCluster

pytestmark = [pytest.mark.slurm, pytest.mark.e2e]

SNAKEMAKE = str(VENV_BIN / "snakemake")
FARM = """
rule all:
    input: expand("out/{i}.txt", i=range(48))

rule task:
    output: "out/{i}.txt"
    shell: "sleep 0.5; echo $SLURMD_NODENAME $(hostname) > {output}"
"""


def farm(tmp_path: Path, snakefile: str = FARM) -> Path:
    (tmp_path / "Snakefile").write_text(snakefile)
    return tmp_path


def in_allocation(
    cluster: SlurmTestCluster,
    workdir: Path,
    token: str,
    *args: str,
    nodes: int = 3,
    salloc_extra: tuple[str, ...] = (),
) -> Run:
    argv = [SNAKEMAKE, "--executor", "dask-slurm", "--jobs", "100", *args]
    proc = cluster.salloc(
        [f"-N{nodes}", "--exclusive", f"--chdir={workdir}", "--time=5", *salloc_extra],
        argv,
        timeout=240,
        env_extra={"DASK_SLURM_TEST_TOKEN": token},
    )
    return Run(proc.returncode, proc.stdout + proc.stderr)


def hosts_used(workdir: Path) -> Counter[str]:
    used: Counter[str] = Counter()
    for path in (workdir / "out").glob("*.txt"):
        node, hostname = path.read_text().split()
        assert node == hostname  # each node really is its own host
        used[node] += 1
    return used


def assert_cleaned_up(workdir: Path) -> None:
    assert not (workdir / ".snakemake/dask-slurm/logs/scheduler.json").exists()
    assert (workdir / ".snakemake/dask-slurm/logs/scheduler.log").exists(), "logs are kept"
    assert not list((workdir / ".snakemake/dask-slurm").glob("tls-*")), "credentials are kept"


def test_task_farm_in_salloc_uses_every_node(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str
) -> None:
    workdir = farm(tmp_path)
    run = in_allocation(slurm_cluster, workdir, no_leftovers)
    assert run.returncode == 0, run
    used = hosts_used(workdir)
    assert sum(used.values()) == 48
    assert set(used) == {"n1", "n2", "n3"}, used
    out = run.output
    assert "CPUs per node 4,4,8 (from SLURM_JOB_CPUS_PER_NODE=4(x2),8)" in out
    assert "2 node(s) of 4 CPUs (n1,n2): 1 worker(s) x 4 thread(s)" in out
    assert "1 node(s) of 8 CPUs (n3): 1 worker(s) x 8 thread(s)" in out
    assert "scheduler on" in out and "tls://10.77.0.1:" in out, "not on the nodes' route"
    assert "ssh -N -L" in out
    assert_cleaned_up(workdir)
    # After a normal end the retired workers exit by themselves, unsignalled.
    logs = sorted((workdir / ".snakemake/dask-slurm/logs").glob("workers-*.log"))
    assert len(logs) == 2, logs  # one per srun step (node sizes 4 and 8)
    for log in logs:
        text = log.read_text()
        # Each worker ends by itself: told by the scheduler, or (a benign race) finding
        # out at its next heartbeat that the scheduler already removed it.
        started = text.count("Start worker at:")
        assert started >= 1 and text.count("End worker") == started, text
        assert "Received signal" not in text, text
    # The usage report: every job measured on the node it ran on, each node's CPUs counted.
    report = workdir / ".snakemake/dask-slurm/usage/latest"
    with (report / "jobs.tsv").open() as f:
        jobs = list(csv.DictReader(f, delimiter="\t"))
    measured = Counter(row["host"] for row in jobs if row["cpu_s"])
    assert measured == used, (measured, used)
    assert "usage: " in out and (report / "report.html").exists(), out


def test_explicit_worker_count_is_split_by_node_size(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str
) -> None:
    workdir = farm(tmp_path)
    run = in_allocation(slurm_cluster, workdir, no_leftovers, "--dask-slurm-workers", "4")
    assert run.returncode == 0, run
    assert "1 worker(s) x 4 thread(s)" in run.output
    assert "(n3): 2 worker(s) x 4 thread(s)" in run.output
    assert "all 4 workers registered" in run.output
    assert set(hosts_used(workdir)) == {"n1", "n2", "n3"}


def test_inside_an_sbatch_script(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str
) -> None:
    workdir = farm(tmp_path)
    script = (
        "#!/bin/bash\n"
        f"cd {workdir}\n"
        "echo batch-host=$(hostname)\n"
        f"export DASK_SLURM_TEST_TOKEN={no_leftovers}\n"
        f"exec {SNAKEMAKE} --executor dask-slurm --jobs 100\n"
    )
    result = slurm_cluster.sbatch_and_wait(
        script, ["-N3", "--exclusive", f"--output={workdir}/job.out", "--time=5"], timeout=240
    )
    output = (workdir / "job.out").read_text()
    assert result.state == "COMPLETED", output
    assert "batch-host=n1" in output
    # On an allocated node the scheduler listens on the route to the other nodes.
    assert "at tls://10.77.0.11:" in output
    assert "address on the route to n2 (this process runs on an allocated node" in output
    assert set(hosts_used(workdir)) == {"n1", "n2", "n3"}
    assert_cleaned_up(workdir)


def test_a_rule_can_start_its_own_srun_step(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str
) -> None:
    workdir = farm(
        tmp_path,
        'rule all:\n    output: "mpi.txt"\n'
        '    shell: "srun --nodes=3 --ntasks-per-node=1 hostname | sort > {output}"\n',
    )
    started = time.monotonic()
    run = in_allocation(slurm_cluster, workdir, no_leftovers)
    assert run.returncode == 0, run
    assert (workdir / "mpi.txt").read_text() == "n1\nn2\nn3\n"
    assert time.monotonic() - started < 120


def run_failing(
    cluster: SlurmTestCluster, tmp_path: Path, token: str, *args: str, started: bool = True
) -> tuple[Run, float]:
    """Run the farm, expecting failure; ``started``: whether anything was started (and
    so left its logs) before the failure."""
    workdir = farm(tmp_path)
    begin = time.monotonic()
    run = in_allocation(cluster, workdir, token, "--dask-slurm-startup-timeout", "20", *args)
    elapsed = time.monotonic() - begin
    assert run.returncode != 0, run
    assert not list((workdir / "out").glob("*.txt")) if (workdir / "out").exists() else True
    if started:
        assert_cleaned_up(workdir)
    else:
        assert not (workdir / ".snakemake/dask-slurm/logs/scheduler.log").exists(), run
    return run, elapsed


def test_dask_missing_on_the_nodes(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str
) -> None:
    # The nodes get an environment whose Python cannot start: as if the plugin's
    # environment did not exist there.
    run, elapsed = run_failing(
        slurm_cluster, tmp_path, no_leftovers,
        # "=" form: argparse takes a separate value starting with "--" for an option.
        "--dask-slurm-srun-args=--export=ALL,PYTHONHOME=/nonexistent",
    )  # fmt: skip
    assert "srun step for" in run.output and "before all workers registered" in run.output, run
    assert "PYTHONHOME" in run.output or "encodings" in run.output, "step log not quoted"
    assert "must work there" in run.output
    assert elapsed < 60


def test_step_refused_by_slurm(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str
) -> None:
    run, elapsed = run_failing(
        slurm_cluster, tmp_path, no_leftovers, "--dask-slurm-srun-args=--gres=gpu:1"
    )
    assert "srun step for" in run.output and "exited with code" in run.output, run
    assert "srun: error" in run.output, "srun's own message not quoted"
    assert elapsed < 60


def test_workers_that_never_register(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str
) -> None:
    # Bound to loopback, the scheduler is unreachable from the nodes' namespaces.
    run, elapsed = run_failing(
        slurm_cluster, tmp_path, no_leftovers,
        "--dask-slurm-scheduler-host", "127.0.0.1", "--dask-slurm-startup-timeout", "8",
    )  # fmt: skip
    assert "Only 0 of 3 Dask workers registered within 8 s" in run.output, run
    assert "--dask-slurm-interface" in run.output
    assert elapsed < 60


def test_a_scheduler_host_this_machine_does_not_have(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str
) -> None:
    # An address this host does not have: refused before anything starts, with the reason.
    run, elapsed = run_failing(
        slurm_cluster, tmp_path, no_leftovers, "--dask-slurm-scheduler-host", "10.77.0.99",
        started=False,
    )  # fmt: skip
    assert "The scheduler cannot listen on 10.77.0.99" in run.output, run
    assert "Cannot assign requested address [errno 99]" in run.output, run
    assert "Traceback" not in run.output
    assert elapsed < 30


def test_failing_rule_in_an_allocation_names_the_node(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str
) -> None:
    shutil.copytree(WORKFLOWS / "fail", tmp_path / "fail")
    run = in_allocation(slurm_cluster, tmp_path / "fail", no_leftovers)
    assert run.returncode == 1
    assert "rule bad (jobid" in run.output and "exited with code 3 on n" in run.output, run


def test_squeue_shows_one_step_per_node_size_while_running(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str
) -> None:
    workdir = farm(
        tmp_path,
        'rule all:\n    output: "steps.txt"\n'
        '    shell: "squeue -s -h -j $SLURM_JOB_ID -o %j > {output}"\n',
    )
    run = in_allocation(slurm_cluster, workdir, no_leftovers)
    assert run.returncode == 0, run
    steps = Counter((workdir / "steps.txt").read_text().split())
    assert steps["dask-workers"] == 2, steps  # sizes 4 and 8: two steps, none per rule


# How the plugin must name each way an allocation can end under it. COMPLETING is what
# SLURM shows while it still cleans up the nodes (up to KillWait); the reason still tells.
ENDINGS = {
    "scancel": r"\(state (CANCELLED|COMPLETING)\): (most likely )?it was cancelled \(scancel",
    "time-limit": r"\(state (TIMEOUT|COMPLETING), reason TimeLimit\): it reached its time limit",
}


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_an_allocation_that_ends_under_the_plugin_leaves_nothing(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str, ending: str
) -> None:
    workdir = farm(
        tmp_path,
        'rule all:\n    input: expand("o{i}", i=range(6))\n'
        'rule s:\n    output: "o{i}"\n'
        f'    shell: "touch started{{wildcards.i}}; sleep 300 # {no_leftovers}"\n',
    )
    name = f"{ending}-{no_leftovers}"
    # SLURM's shortest time limit is a minute; it acts on it within its next check (~30 s).
    limit = ["--time=1"] if ending == "time-limit" else []
    proc = subprocess.Popen(
        ["salloc", f"--job-name={name}", "-N3", "--exclusive", *limit, f"--chdir={workdir}",
         SNAKEMAKE, "--executor", "dask-slurm", "--jobs", "10",
         # What happens when the allocation ends anyway: the clock is not watched.
         "--dask-slurm-landing-margin", "0"],
        env={**slurm_cluster.env, "DASK_SLURM_TEST_TOKEN": no_leftovers},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,  # so that a failure below can end salloc *and* Snakemake
    )  # fmt: skip
    lines: list[tuple[float, str]] = []  # when each line of output arrived
    reader = threading.Thread(
        target=lambda: lines.extend((time.monotonic(), line) for line in proc.stdout or ())
    )
    reader.start()
    try:
        eventually(
            "a job started",
            lambda: list(workdir.glob("started*")),
            120,
            interval=0.2,
            check=still_running(proc, lambda: "".join(line for _, line in lines)),
        )
        if ending == "scancel":
            slurm_cluster.run(["scancel", f"--name={name}"])
        proc.wait(timeout=150)
        ended = time.monotonic()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        reader.join(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
    output = "".join(line for _, line in lines)

    def first(text: str) -> float:
        return next(t for t, line in lines if text in line)

    # salloc does not end its command when the allocation goes: the plugin notices its
    # srun steps or workers are gone, fails the running jobs and stops.
    assert proc.returncode != 0
    # Whichever the plugin sees first (a step that ended, or one, two or all three workers
    # gone from the scheduler), it asks SLURM and names the real cause.
    granted = re.search(r"Granted job allocation (\d+)", output)
    assert granted, output
    broke = re.search(
        rf"the Dask cluster broke: SLURM allocation {granted[1]} has ended {ENDINGS[ending]}",
        output,
    )
    assert broke, output
    # One message for the whole run, not one block per job.
    assert output.count("the Dask cluster broke") == 1, output
    assert "Error in rule" not in output, output
    # Seconds from SLURM revoking the allocation (salloc: "Job allocation N has been
    # revoked.", or "Job N has exceeded its time limit and its allocation has been
    # revoked.") to the plugin saying so, and to the end of Snakemake: never a hang.
    revoked = first("has been revoked")
    noticed = first("the Dask cluster broke") - revoked
    assert noticed < 5, f"the plugin noticed {noticed:.1f} s after SLURM revoked the allocation"
    assert ended - revoked < 30, f"Snakemake ended {ended - revoked:.1f} s after the revocation"
    assert "Dask cluster closed in" in output[output.index("has been revoked") :], output
    # The run's TLS credentials went with it.
    assert not list((workdir / ".snakemake/dask-slurm").glob("tls-*"))
    # The workers on the nodes belong to the ended job: SLURM itself ends them,
    # with SIGKILL at the latest after KillWait (30 s by default).
    left = wait_until_gone(no_leftovers, str(tmp_path), timeout=45)
    assert not left, left
    # The allocation itself is SLURM's to end: it can stay COMPLETING a few seconds after
    # its processes went, while slurmd finishes the steps and the epilog (a CI rehearsal,
    # 2026-12-04: still listed 5 s after the test). Listed after 30 s, it was left behind.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(j.name == name for j in slurm_cluster.squeue_jobs()):
        time.sleep(0.5)
    assert not [j for j in slurm_cluster.squeue_jobs() if j.name == name]


def test_allocation_state_from_the_real_controller(
    slurm_cluster: SlurmTestCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    from snakemake_executor_plugin_dask_slurm.slurm.run import scontrol_job_state

    scontrol = shutil.which("scontrol")
    assert scontrol
    monkeypatch.setenv("SLURM_CONF", slurm_cluster.env["SLURM_CONF"])
    granted = slurm_cluster.run(["salloc", "--no-shell", "-N1", "--job-name=state-probe"])
    found = re.search(r"Granted job allocation (\d+)", granted.stderr)
    assert found, granted.stderr
    job_id = found[1]
    try:
        assert scontrol_job_state(scontrol, job_id, timeout=10) == ("RUNNING", "None")
    finally:
        slurm_cluster.run(["scancel", job_id])
    eventually(
        "the allocation cancelled",
        lambda: scontrol_job_state(scontrol, job_id, timeout=10) == ("CANCELLED", "None"),
        20,
        interval=0.1,
    )
    assert scontrol_job_state(scontrol, "987654", timeout=10) == ("GONE", "None")


MEMORY = """
rule all:
    input: expand("small{i}.txt", i=range(3)), "big.txt"

rule small:
    output: "small{i}.txt"
    resources: mem_mb=500
    shell: "echo ok > {output}"

rule big:
    output: "big.txt"
    resources: mem_mb=1600
    shell: "echo never > {output}"
"""


def test_memory_grant_becomes_a_worker_resource(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str
) -> None:
    workdir = farm(tmp_path, MEMORY)
    run = in_allocation(
        slurm_cluster, workdir, no_leftovers, "--keep-going", salloc_extra=("--mem=1500",)
    )
    assert run.returncode == 1, run
    # --mem=1500 is 1500 MiB, 1572 MB: mem_mb's unit, so the 1600 MB rule still does not fit.
    assert "memory per node: 1572 MB (SLURM_MEM_PER_NODE=1500 MiB)" in run.output
    assert [(workdir / f"small{i}.txt").read_text() for i in range(3)] == ["ok\n"] * 3
    assert "rule big (jobid" in run.output and "asks for cpus=1, mem_mb=1600" in run.output
    assert "the largest worker offers cpus=8, mem_mb=1572" in run.output
    assert not (workdir / "big.txt").exists()
