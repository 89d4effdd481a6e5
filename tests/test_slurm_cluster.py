"""Smoke tests of the SLURM test cluster itself: is it a real multi-node, heterogeneous SLURM?

Run with `pytest tests/test_slurm_cluster.py -v -s` to see the timings as they happen; they
are also listed in the terminal summary.
"""

from __future__ import annotations

import json
import socket
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from testcluster import cluster
from tests.waiting import eventually

if TYPE_CHECKING:  # imported by pytest_plugins below, so that pytest can rewrite its asserts
    from tests.slurm_cluster.fixtures import SlurmTestCluster


pytestmark = pytest.mark.slurm

PY = sys.executable  # the nodes share this file system, so they can run it too


def all_nodes(c: SlurmTestCluster) -> list[str]:
    return [f"-N{len(c.nodes)}", "--exclusive"]


def test_sinfo_shows_every_node_idle_with_declared_cpus(slurm_cluster: SlurmTestCluster) -> None:
    proc = slurm_cluster.run(["sinfo", "-h", "-N", "-o", "%N %t %c %m"])
    assert proc.returncode == 0, proc.stderr
    rows = sorted(line.split() for line in proc.stdout.splitlines())
    assert rows == sorted(
        [name, "idle", str(cpus), "2000"] for name, cpus, _ in slurm_cluster.nodes
    )


def test_exclusive_allocation_reports_declared_cpus_per_node(
    slurm_cluster: SlurmTestCluster,
) -> None:
    proc = slurm_cluster.salloc(all_nodes(slurm_cluster), ["printenv", "SLURM_JOB_CPUS_PER_NODE"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == cluster.compressed_cpus(
        [cpus for _, cpus, _ in slurm_cluster.nodes]
    )


def test_each_node_task_reports_its_own_hostname(slurm_cluster: SlurmTestCluster) -> None:
    code = "import os, socket; print(socket.gethostname(), os.environ['SLURMD_NODENAME'])"
    srun = ["srun", "--ntasks-per-node=1", PY, "-c", code]
    proc = slurm_cluster.salloc(all_nodes(slurm_cluster), srun)
    assert proc.returncode == 0, proc.stderr
    names = [name for name, _, _ in slurm_cluster.nodes]
    assert sorted(proc.stdout.splitlines()) == sorted(f"{n} {n}" for n in names)


def test_login_and_nodes_resolve_node_names(slurm_cluster: SlurmTestCluster) -> None:
    for name, _, address in slurm_cluster.nodes:
        assert socket.gethostbyname(name) == address
    names = ["head", *(name for name, _, _ in slurm_cluster.nodes)]
    code = f"import socket; print(*(socket.gethostbyname(n) for n in {names!r}))"
    last = slurm_cluster.nodes[-1][0]
    proc = slurm_cluster.salloc(["-N1", "-w", last], ["srun", PY, "-c", code], timeout=30)
    assert proc.returncode == 0, proc.stderr
    addresses = [address for _, _, address in slurm_cluster.nodes]
    assert proc.stdout.split() == [slurm_cluster.login_address, *addresses]


@pytest.fixture
def login_server(slurm_cluster: SlurmTestCluster) -> Iterator[tuple[int, list[str]]]:
    """A TCP server on the login host's bridge address collecting one line per client."""
    received: list[str] = []
    server = socket.create_server((slurm_cluster.login_address, 0))
    server.settimeout(30)

    def serve() -> None:
        with server:
            for _ in slurm_cluster.nodes:
                try:
                    conn, _ = server.accept()
                except OSError:
                    return
                with conn:
                    conn.settimeout(10)
                    received.append(conn.recv(1024).decode().strip())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], received
    thread.join(timeout=35)


def test_a_task_on_each_node_reaches_a_server_on_the_login_host(
    slurm_cluster: SlurmTestCluster, login_server: tuple[int, list[str]]
) -> None:
    port, received = login_server
    address = (slurm_cluster.login_address, port)
    code = (
        f"import socket; s = socket.create_connection({address!r}, timeout=10); "
        "s.sendall(socket.gethostname().encode()); s.close()"
    )
    srun = ["srun", "--ntasks-per-node=1", PY, "-c", code]
    proc = slurm_cluster.salloc(all_nodes(slurm_cluster), srun)
    assert proc.returncode == 0, proc.stderr
    deadline = time.monotonic() + 10
    while len(received) < len(slurm_cluster.nodes) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sorted(received) == sorted(name for name, _, _ in slurm_cluster.nodes)


def test_sbatch_runs_the_script_on_the_first_node(slurm_cluster: SlurmTestCluster) -> None:
    script = (
        "#!/bin/sh\n"
        "echo node=$SLURMD_NODENAME host=$(hostname) cpus=$SLURM_CPUS_ON_NODE "
        "job_cpus=$SLURM_JOB_CPUS_PER_NODE\n"
    )
    result = slurm_cluster.sbatch_and_wait(script, all_nodes(slurm_cluster), timeout=60)
    first, first_cpus, _ = slurm_cluster.nodes[0]
    job_cpus = cluster.compressed_cpus([cpus for _, cpus, _ in slurm_cluster.nodes])
    assert (result.state, result.exit_code) == ("COMPLETED", "0:0")
    assert result.output.split() == [
        f"node={first}",
        f"host={first}",
        f"cpus={first_cpus}",
        f"job_cpus={job_cpus}",
    ]


def test_scancel_ends_a_running_step(slurm_cluster: SlurmTestCluster, tmp_path: Path) -> None:
    script = "#!/bin/sh\nsrun --job-name=sleeper sleep 300\necho step-exit=$?\n"
    out = tmp_path / "job.out"
    job_id = slurm_cluster.sbatch(script, ["-N1", f"--output={out}"])
    step = wait_for_step(slurm_cluster, "sleeper", timeout=30)
    began = time.monotonic()
    assert slurm_cluster.run(["scancel", step]).returncode == 0
    state, _ = slurm_cluster.wait_job(job_id, timeout=60)
    slurm_cluster.record_timing(
        "scancel of a step until its batch job ended", time.monotonic() - began
    )
    assert state == "COMPLETED"
    exit_line = out.read_text().split()[-1]
    assert exit_line.startswith("step-exit=") and exit_line != "step-exit=0"


def wait_for_step(slurm_cluster: SlurmTestCluster, name: str, timeout: float) -> str:
    steps = eventually(
        f"a step named {name}",
        lambda: [s.step_id for s in slurm_cluster.squeue_steps() if s.name == name],
        timeout,
    )
    return steps[0]


OVERLAP_DRIVER = r"""
import json, os, subprocess, sys, time
worker_flags, second_flags, cpus, bound = json.loads(sys.argv[1])
worker = subprocess.Popen(
    ["srun", *worker_flags, "-n1", f"-c{cpus}", "--job-name=worker", "sleep", "120"])
deadline = time.monotonic() + 30
squeue = ["squeue", "-h", "-s", "-j", os.environ["SLURM_JOB_ID"], "-o", "%j"]
while "worker" not in subprocess.run(squeue, capture_output=True, text=True).stdout:
    assert time.monotonic() < deadline, "worker step did not start"
    time.sleep(0.05)
began = time.monotonic()
second = subprocess.Popen(["srun", *second_flags, "-n1", "-c1", "true"], stderr=subprocess.PIPE)
try:
    started = second.wait(timeout=bound) == 0
except subprocess.TimeoutExpired:
    started = False
    second.terminate()
    second.wait(timeout=30)
print(json.dumps({"started": started, "seconds": time.monotonic() - began}))
worker.terminate()
worker.wait(timeout=60)
"""


@pytest.mark.parametrize(
    ("worker_flags", "second_flags", "starts"),
    [
        (["--overlap"], [], True),
        (["--overlap"], ["--overlap"], True),
        ([], ["--overlap"], True),
        ([], [], False),
    ],
    ids=["worker-overlap", "both-overlap", "second-overlap", "neither"],
)
def test_second_step_beside_a_worker_step_holding_all_cpus(
    slurm_cluster: SlurmTestCluster,
    worker_flags: list[str],
    second_flags: list[str],
    starts: bool,
) -> None:
    """Slurm 22.05: one of the two steps needs --overlap for the second to start at once."""
    first, cpus, _ = slurm_cluster.nodes[0]
    bound = 3.0
    argv = [PY, "-c", OVERLAP_DRIVER, json.dumps([worker_flags, second_flags, cpus, bound])]
    proc = slurm_cluster.salloc(["-N1", "-w", first, "--exclusive"], argv, timeout=90)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["started"] is starts, result
    if starts:
        label = f"second step start, worker {worker_flags} second {second_flags}"
        slurm_cluster.record_timing(label, result["seconds"])


STEP_TIMING_DRIVER = r"""
import json, subprocess, sys, time
n, repeats = int(sys.argv[1]), int(sys.argv[2])
times = []
for _ in range(repeats):
    began = time.monotonic()
    subprocess.run(["srun", f"-N{n}", "--ntasks-per-node=1", "true"], check=True)
    times.append(time.monotonic() - began)
print(json.dumps(times))
"""


def test_multi_node_step_start_inside_an_exclusive_allocation(
    slurm_cluster: SlurmTestCluster,
) -> None:
    n = len(slurm_cluster.nodes)
    argv = [PY, "-c", STEP_TIMING_DRIVER, str(n), "10"]
    began = time.monotonic()
    proc = slurm_cluster.salloc(all_nodes(slurm_cluster), argv, timeout=120)
    slurm_cluster.record_timing(f"salloc -N{n} --exclusive with 10 steps", time.monotonic() - began)
    assert proc.returncode == 0, proc.stderr
    times = json.loads(proc.stdout.strip().splitlines()[-1])
    slurm_cluster.record_timing(f"srun -N{n} step, median of 10", statistics.median(times))
    slurm_cluster.record_timing(f"srun -N{n} step, slowest of 10", max(times))
    assert max(times) < 10


def test_memory_can_be_requested_up_to_real_memory(slurm_cluster: SlurmTestCluster) -> None:
    fits = slurm_cluster.salloc(["-N1", "--mem=2000"], ["true"], timeout=30)
    assert fits.returncode == 0, fits.stderr
    too_much = slurm_cluster.salloc(["-N1", "--mem=4000"], ["true"], timeout=30)
    assert too_much.returncode != 0
    assert "Requested node configuration is not available" in too_much.stderr


def test_a_pending_allocation_is_bounded_and_cleaned_up(
    slurm_cluster: SlurmTestCluster,
) -> None:
    from tests.slurm_cluster.fixtures import SlurmCommandTimeout

    began = time.monotonic()
    with pytest.raises(SlurmCommandTimeout, match="did not finish within 3 s"):
        slurm_cluster.salloc(["-N1", "--begin=now+1hour"], ["true"], timeout=3)
    assert time.monotonic() - began < 20
    slurm_cluster.assert_no_jobs_left()
