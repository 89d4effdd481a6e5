"""Secure by default inside a real allocation of the project's SLURM test cluster: during a
run on three nodes, processes on another node (its own network namespace) without the
run's credentials cannot use the cluster, nor reach the dashboard or the workers' HTTP
servers; another user (``nobody``) on the submit host gets 403 from the scheduler's HTTP
server, and on each node from that node's worker, on every path; the owner opens the
dashboard with the link in the file the run names; no command line or environment of any
process the plugin started (scheduler, srun steps, supervisors, workers) holds key
material or the HTTP token; the certificate lives no longer than the allocation; and
every output is right."""

from __future__ import annotations

import datetime
import json
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from cryptography import x509

from snakemake_executor_plugin_dask_slurm.clusters.security import CLOCK_SKEW
from tests.appenders import check_outputs, started
from tests.conftest import VENV_BIN, WORKFLOWS, live_processes
from tests.http_probes import OwnerSession, holding, other_user_statuses, readable_by_others
from tests.intruders import (
    can_connect,
    foreign_credentials,
    in_netns,
    key_secrets,
    leaks,
    listening,
    start_worker,
    try_client,
)
from tests.waiting import eventually, still_running

if TYPE_CHECKING:
    from tests.slurm_cluster.fixtures import SlurmTestCluster

pytestmark = [pytest.mark.slurm, pytest.mark.e2e]

COUNT, STEPS = 12, 60  # 30 s a job, all at once on 16 CPUs


def node_of(pid: int) -> str:
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    found = [e.split(b"=", 1)[1].decode() for e in environ if e.startswith(b"SLURMD_NODENAME=")]
    return found[0] if found else ""


def test_another_nodes_processes_cannot_use_the_runs_cluster(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str
) -> None:
    workdir = tmp_path / "appenders"
    shutil.copytree(WORKFLOWS / "appenders", workdir)
    out = tmp_path / "salloc.out"
    argv = [
        "salloc", f"--job-name=sec-{no_leftovers}", "-N3", "--exclusive", "--time=30",
        f"--chdir={workdir}", str(VENV_BIN / "snakemake"), "--executor", "dask-slurm",
        "--jobs", "100", "--config", f"token={no_leftovers}", f"count={COUNT}",
        f"steps={STEPS}",
    ]  # fmt: skip
    with out.open("w") as sink:
        proc = subprocess.Popen(
            argv, env={**slurm_cluster.env, "DASK_SLURM_TEST_TOKEN": no_leftovers},
            stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    other = "dask-slurm-n2"  # another node's network namespace
    addresses = {name: address for name, _, address in slurm_cluster.nodes}
    intruders: list[subprocess.Popen[bytes]] = []
    try:
        run_dir = workdir / ".snakemake/dask-slurm"
        eventually(  # every job runs: the cluster is all up
            "every job started",
            lambda: started(workdir) >= COUNT,
            120,
            interval=0.2,
            check=still_running(proc, out.read_text),
        )
        address = json.loads((run_dir / "logs/scheduler.json").read_text())["address"]
        assert address.startswith(f"tls://{slurm_cluster.login_address}:"), address
        (creds,) = run_dir.glob("tls-*")
        cert_path, key_path = str(creds / "run-ca-and-cert.pem"), str(creds / "run-key.pem")

        # No longer than the allocation (30 minutes, some seconds of it gone).
        cert = x509.load_pem_x509_certificate(Path(cert_path).read_bytes())
        lifetime = cert.not_valid_after_utc - (cert.not_valid_before_utc + CLOCK_SKEW)
        assert datetime.timedelta(minutes=29) < lifetime <= datetime.timedelta(minutes=30)

        # From another node: plain TCP, other credentials, workers without ours.
        plain = try_client(address.replace("tls://", "tcp://"), None, netns=other)
        assert plain["connected"] is False, plain
        fcert, fkey = foreign_credentials(tmp_path / "other-user")
        foreign = try_client(address, (fcert, fcert, fkey), netns=other)
        assert foreign["connected"] is False, foreign
        intruders = [
            start_worker(address.replace("tls://", "tcp://"), tmp_path / "w1.log", None, other),
            start_worker(address, tmp_path / "w2.log", (fcert, fkey), other),
        ]
        time.sleep(5)
        own = try_client(address, (cert_path, cert_path, key_path), netns=other)
        assert own == {"connected": True, "workers": ["n1", "n2", "n3"]}, own

        # Key material: in no command line or environment of the plugin's processes.
        ours = [pid for pid, _ in live_processes(no_leftovers, str(tmp_path))]
        ours = [pid for pid in ours if "intruder" not in Path(f"/proc/{pid}/cmdline").read_text()]
        commands = " ".join(Path(f"/proc/{pid}/cmdline").read_text() for pid in ours)
        for kind in ("dask_scheduler", "srun", "worker.supervisor", "dask_worker"):
            assert kind in commands, (kind, commands)
        assert leaks(ours, key_secrets(Path(key_path).read_bytes())) == []

        # The dashboard: the real page on the scheduler host's loopback, nothing from
        # another node; the printed tunnel names this host and the port. salloc's output
        # here is a file others may read: the line names the file with the link, not the token.
        text = out.read_text()
        link = re.search(r"Dask dashboard: http://127\.0\.0\.1:(\d+)/status on (\S+)", text)
        assert link and link[2] == socket.gethostname(), text
        port = int(link[1])
        assert re.search(rf"'ssh -N -L {port}:127\.0\.0\.1:{port} (-J \S+ )?{link[2]}'", text)
        token = (creds / "http-token").read_text()
        assert f"the link with it is in {creds}/dashboard-link (only you can read it)" in text
        assert f"/status?token={token} on {link[2]}" in (creds / "dashboard-link").read_text()
        assert not can_connect(slurm_cluster.login_address, port, netns=other)
        # Another user of the submit host: 403 everywhere; the owner: the dashboard.
        statuses = other_user_statuses("127.0.0.1", [port])
        assert set(statuses.values()) == {"403"}, statuses
        owner = OwnerSession("127.0.0.1", port)
        status, body = owner.follow(f"/status?token={token}")
        assert status == 200 and "bokeh" in body.lower(), body[:500]

        # Each worker's own HTTP server: loopback of its node, not reachable from here;
        # another user on that node gets 403, the token's holder an answer.
        workers = [pid for pid in ours if "dask_worker" in Path(f"/proc/{pid}/cmdline").read_text()]
        assert sorted(node_of(pid) for pid in workers) == ["n1", "n2", "n3"]
        header = tmp_path / "authorization"
        header.write_text(f"Authorization: token {token}\n")
        for pid in workers:
            node = node_of(pid)
            http = [p for ip, p in listening(pid) if ip == "127.0.0.1"]
            assert len(http) == 1, listening(pid)
            assert not can_connect(addresses[node], http[0]), (node, http)
            netns = f"dask-slurm-{node}"
            statuses = other_user_statuses("127.0.0.1", http, netns=netns)
            assert set(statuses.values()) == {"403"}, (node, statuses)
            health = subprocess.run(
                in_netns(["curl", "-s", "-m", "5", "-H", f"@{header}",
                          f"http://127.0.0.1:{http[0]}/health"], netns),
                capture_output=True, text=True, timeout=30,
            )  # fmt: skip
            assert health.stdout == "ok", (node, health)

        # The token: in no command line or environment, no file others can read.
        assert leaks(ours, [token.encode()]) == []
        assert token not in out.read_text()
        assert holding(readable_by_others(workdir), token) == []
    finally:
        for intruder in intruders:
            intruder.kill()
            intruder.wait()
        try:
            proc.wait(timeout=180)
        finally:
            if proc.poll() is None:
                slurm_cluster.run(["scancel", f"--name=sec-{no_leftovers}"])
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, out.read_text()
    check_outputs(workdir, COUNT, STEPS)
    assert not list((workdir / ".snakemake/dask-slurm").glob("tls-*"))
