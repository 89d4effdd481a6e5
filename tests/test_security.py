"""Secure by default, on the embedded local cluster: during a real run, only the run's own
processes can use its Dask cluster (a plain-TCP client, a TLS client with other
credentials and a ``dask worker`` without the run's credentials are all turned away, and
the run goes on unharmed); the credentials are private files, never in a command line or
an environment, gone after the run however it ends; the dashboard is the real one, on
loopback, and every HTTP port of the run (the scheduler's, the worker's) answers another
user (``nobody``) 403 on every path, while the owner opens it with the printed link; its
token is in no command line, environment, file others can read, nor Snakemake's log. The
SLURM side (probes from another node) is in tests/test_slurm_security.py.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography import x509

from snakemake_executor_plugin_dask_slurm.clusters.security import CLOCK_SKEW, DEFAULT_LIFETIME
from tests.appenders import check_outputs
from tests.conftest import VENV_BIN, Workflow, live_processes
from tests.http_probes import (
    PATHS,
    OwnerSession,
    holding,
    other_user_statuses,
    page_resources,
    readable_by_others,
)
from tests.intruders import (
    foreign_credentials,
    key_secrets,
    leaks,
    listening,
    start_worker,
    try_client,
)
from tests.waiting import eventually, still_running

pytestmark = pytest.mark.e2e

COUNT, STEPS = 4, 4  # 2 s a job; the first test holds its jobs while it probes the run


def wait_for(
    what: str, ready: Callable[[], bool], proc: subprocess.Popen[bytes], out: Path
) -> None:
    eventually(what, ready, 120, interval=0.1, check=still_running(proc, out.read_text))


def credential_dirs(workdir: Path) -> list[Path]:
    return sorted((workdir / ".snakemake" / "dask-slurm").glob("tls-*"))


@pytest.mark.workflow("appenders")
def test_only_the_runs_own_processes_can_use_its_cluster(
    workflow: Workflow, tmp_path: Path
) -> None:
    out = tmp_path / "snakemake.out"
    # The run lasts as long as the probing: its jobs cannot end until the hold is let go.
    hold = workflow.path / "hold"
    hold.touch()
    argv = [
        str(VENV_BIN / "snakemake"), "--executor", "dask-slurm", "--jobs", "4",
        "--config", f"token={workflow.token}", f"count={COUNT}", f"steps={STEPS}",
        f"hold={hold}",
    ]  # fmt: skip
    # Only the user reads the run's output (a terminal, or a private file): the link with
    # the token is printed there.
    with os.fdopen(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as sink:
        proc = subprocess.Popen(
            argv, cwd=workflow.path, env=workflow.env(), stdout=sink, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    intruders: list[subprocess.Popen[bytes]] = []
    try:
        scheduler_file = workflow.path / ".snakemake/dask-slurm/logs/scheduler.json"
        wait_for("the first job", lambda: (workflow.path / "events.log").exists(), proc, out)
        made = datetime.datetime.now(datetime.UTC)
        address = json.loads(scheduler_file.read_text())["address"]
        assert address.startswith("tls://127.0.0.1:"), address

        # The credentials: one private directory of private files.
        (creds,) = credential_dirs(workflow.path)
        assert creds.name == f"tls-{socket.gethostname()}-{proc.pid}"
        assert stat.S_IMODE(creds.stat().st_mode) == 0o700
        files = sorted(p.name for p in creds.iterdir())
        assert files == ["dashboard-link", "http-token", "run-ca-and-cert.pem", "run-key.pem"]
        assert all(stat.S_IMODE((creds / f).stat().st_mode) == 0o600 for f in files)
        cert_path, key_path = str(creds / "run-ca-and-cert.pem"), str(creds / "run-key.pem")
        cert = x509.load_pem_x509_certificate((creds / "run-ca-and-cert.pem").read_bytes())
        # Valid from an hour before the run (clock drift) for DEFAULT_LIFETIME outside SLURM.
        start = cert.not_valid_before_utc + CLOCK_SKEW
        assert abs((start - made).total_seconds()) < 60, cert.not_valid_before_utc
        assert cert.not_valid_after_utc - start == DEFAULT_LIFETIME

        # Turned away: plain TCP on the same port, TLS with other credentials.
        plain = try_client(address.replace("tls://", "tcp://"), None)
        assert plain["connected"] is False, plain
        fcert, fkey = foreign_credentials(tmp_path / "other-user")
        foreign = try_client(address, (fcert, fcert, fkey))
        assert foreign["connected"] is False, foreign
        # Workers started by hand without the run's credentials never join.
        intruders = [
            start_worker(address.replace("tls://", "tcp://"), tmp_path / "w1.log", None),
            start_worker(address, tmp_path / "w2.log", (fcert, fkey)),
        ]
        time.sleep(5)
        # Whoever holds the run's files (the user's own processes) gets in, and sees only
        # the run's worker.
        own = try_client(address, (cert_path, cert_path, key_path))
        assert own == {"connected": True, "workers": ["local"]}, own

        # No key material in any command line or environment the plugin started.
        pids = [proc.pid] + [pid for pid, _ in live_processes(workflow.token, str(tmp_path))]
        assert len(pids) >= 4, pids  # Snakemake, scheduler, supervisor, worker, jobs
        assert leaks(pids, key_secrets((creds / "run-key.pem").read_bytes())) == []

        # The dashboard: the real Bokeh pages, on loopback; the workers' HTTP too.
        text = out.read_text()
        # Local mode: the scheduler runs on the user's machine; the link only, no tunnel.
        link = re.search(
            r"dask-slurm: Dask dashboard: http://127\.0\.0\.1:(\d+)/status\?token=(\S+) "
            r"\(loopback only\)\n", text
        )  # fmt: skip
        assert link, text
        port, token = int(link[1]), link[2]
        assert token == (creds / "http-token").read_text()
        assert (creds / "dashboard-link").read_text() == link[0][len("dask-slurm: ") :]
        assert (
            f"Dask dashboard: http://127.0.0.1:{port}/status (loopback only); its pages answer "
            "only with this run's token: the link with it is printed above, not in "
            f"Snakemake's log file, and kept in {creds}/dashboard-link (only you can read it)\n"
        ) in text
        assert "ssh -N" not in text, text
        # Set up at the first visit (worker/scheduler_preload.py), not at the start.
        scheduler_log = workflow.path / ".snakemake/dask-slurm/logs/scheduler.log"
        assert "dashboard pages set up" not in scheduler_log.read_text()
        # The scheduler and the worker run without NumPy (worker/dask_main.py) until
        # the dashboard's pages need it.
        dask = {kind: pid for pid, cmd in live_processes(workflow.token, str(tmp_path))
                for kind in ("dask_scheduler", "dask_worker")
                if f"distributed.cli.{kind}" in cmd and "intruder" not in cmd}  # fmt: skip
        assert set(dask) == {"dask_scheduler", "dask_worker"}, dask
        assert {kind: maps_numpy(pid) for kind, pid in dask.items()} == {
            "dask_scheduler": False, "dask_worker": False}  # fmt: skip
        check_http(workflow.path, port, token, list(dask.values()), pids)
        assert "dashboard pages set up" in scheduler_log.read_text()
        assert maps_numpy(dask["dask_scheduler"]), "the dashboard's Bokeh imported NumPy"
        for pid, cmd in live_processes(workflow.token, str(tmp_path)):
            if "distributed.cli.dask_" in cmd and "intruder" not in cmd:
                assert all(ip == "127.0.0.1" for ip, _ in listening(pid)), (cmd, listening(pid))
        assert "security: mutual TLS with credentials made for this run" in text
    finally:
        hold.unlink()
        for intruder in intruders:
            intruder.kill()
            intruder.wait()
        code = proc.wait(timeout=180)
    assert code == 0, out.read_text()
    check_outputs(workflow.path, COUNT, STEPS)
    assert credential_dirs(workflow.path) == []


def check_http(workdir: Path, port: int, token: str, dask_pids: list[int], pids: list[int]) -> None:
    """Another user gets 403 (or no HTTP at all: the TLS ports) from every port of the
    run's scheduler and worker, on every path and the websocket; the owner, with the
    printed link, gets the dashboard and what it loads (the cookie), and the worker's pages;
    the token is in no command line, no environment and no file others can read."""
    ports = sorted({p for pid in dask_pids for _, p in listening(pid)})
    statuses = other_user_statuses("127.0.0.1", ports)
    assert set(statuses.values()) <= {"403", "000"}, statuses
    http = sorted({int(label.split()[0]) for label, code in statuses.items() if code == "403"})
    assert len(http) == 2 and port in http, statuses  # the scheduler's and the worker's
    assert all(statuses[f"{p} {path}"] == "403" for p in http for path in PATHS), statuses
    assert all(statuses[f"{p} websocket"] == "403" for p in http), statuses
    scheduler_log = workdir / ".snakemake/dask-slurm/logs/scheduler.log"
    assert "dashboard pages set up" not in scheduler_log.read_text()  # not for a stranger
    owner = OwnerSession("127.0.0.1", port)
    status, body = owner.follow(f"/status?token={token}")
    assert status == 200 and "bokeh" in body.lower(), body[:500]
    assert "needs bokeh" not in body.lower()
    assert [owner.get(path)[0] for path in page_resources(body)] == [200] * len(
        page_resources(body)
    )
    (worker_http,) = [p for p in http if p != port]
    worker_pages = OwnerSession("127.0.0.1", worker_http)
    worker_pages.cookies = owner.cookies  # a browser's cookies are per host, not per port
    assert worker_pages.get("/health")[:3:2] == (200, "ok")
    assert leaks(pids, [token.encode()]) == []
    assert holding(readable_by_others(workdir), token) == []
    (log,) = (workdir / ".snakemake/log").glob("*.snakemake.log")
    assert "Dask dashboard: http://127.0.0.1" in log.read_text()
    assert token not in log.read_text()


def maps_numpy(pid: int) -> bool:
    """Whether process ``pid`` has imported NumPy (its compiled core is mapped)."""
    return "_multiarray_umath" in Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.workflow("appenders")
def test_credentials_are_gone_after_failure_and_sigterm(workflow: Workflow) -> None:
    # A failing job ends the run.
    failed = workflow.snakemake(
        "--jobs", "2", "--config", f"token={workflow.token}", "count=2", "steps=1",
        "killer=0",  # job 0 kills its worker every time: the run fails
    )  # fmt: skip
    assert failed.returncode != 0, failed
    assert credential_dirs(workflow.path) == [], failed
    # SIGTERM (SLURM's time limit) while jobs run.
    argv = [
        str(VENV_BIN / "snakemake"), "--executor", "dask-slurm", "--jobs", "2",
        "--config", f"token={workflow.token}", "count=2", "steps=60", "pause=1",
    ]  # fmt: skip
    proc = subprocess.Popen(
        argv, cwd=workflow.path, env=workflow.env(), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        eventually(
            "credentials and a first output",
            lambda: credential_dirs(workflow.path) and (workflow.path / "out/1.txt").exists(),
            120,
            interval=0.1,
            check=still_running(proc),
        )
        os.kill(proc.pid, signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0 and "SIGTERM received" in output, output
    assert credential_dirs(workflow.path) == [], output


@pytest.mark.workflow("appenders")
def test_a_run_killed_outright_leaves_credentials_that_the_next_run_removes(
    workflow: Workflow,
) -> None:
    # What SIGKILL of Snakemake leaves: a directory named for a process that is gone.
    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = workflow.path / ".snakemake/dask-slurm" / f"tls-{socket.gethostname()}-{gone.pid}"
    stale.mkdir(parents=True, mode=0o700)
    (stale / "run-key.pem").write_text("stale")
    # A directory of a live process (another run on this host) is left alone.
    live = stale.with_name(f"tls-{socket.gethostname()}-{os.getpid()}")
    live.mkdir(mode=0o700)
    run = workflow.snakemake(
        "--jobs", "2", "--config", f"token={workflow.token}", "count=2", "steps=1"
    )  # fmt: skip
    assert run.returncode == 0, run
    assert credential_dirs(workflow.path) == [live], run


def test_insecure_runs_plain_tcp_and_says_what_it_gives_away(
    tmp_path: Path, no_leftovers: str
) -> None:
    (tmp_path / "Snakefile").write_text(
        f'rule a:\n    output: "a.txt"\n    shell: "echo ok > {{output}} # {no_leftovers}"\n'
    )
    env = {**os.environ, "DASK_SLURM_TEST_TOKEN": no_leftovers}
    env.pop("SLURM_JOB_ID", None)
    proc = subprocess.run(
        [str(VENV_BIN / "snakemake"), "--executor", "dask-slurm", "--jobs", "1",
         "--dask-slurm-insecure"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "plain TCP without authentication (--dask-slurm-insecure)" in out
    assert "any process that can reach the scheduler can run code as you" in out
    log = (tmp_path / ".snakemake/dask-slurm/logs/scheduler.log").read_text()
    assert re.search(r"Scheduler at:\s+tcp://127\.0\.0\.1:\d+", log), log
    assert not list((tmp_path / ".snakemake/dask-slurm").glob("tls-*"))


def test_attach_to_a_tls_scheduler_with_credentials_from_settings_or_dask_config(
    tmp_path: Path, no_leftovers: str
) -> None:
    from snakemake_executor_plugin_dask_slurm.clusters.security import make_credentials

    now = datetime.datetime.now(datetime.UTC)
    key, cert = make_credentials(now, now + datetime.timedelta(hours=1))
    (tmp_path / "site.key").write_bytes(key)
    (tmp_path / "site.pem").write_bytes(cert)
    tls = ["--tls-ca-file", str(tmp_path / "site.pem"), "--tls-cert",
           str(tmp_path / "site.pem"), "--tls-key", str(tmp_path / "site.key")]  # fmt: skip
    sched_file = tmp_path / "scheduler.json"
    python = str(VENV_BIN / "python")
    env = {**os.environ, "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"}
    env.pop("SLURM_JOB_ID", None)
    scheduler = subprocess.Popen(
        [python, "-m", "distributed.cli.dask_scheduler", "--scheduler-file", str(sched_file),
         "--host", "127.0.0.1", "--port", "0", "--dashboard-address", "127.0.0.1:0", *tls],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    worker = subprocess.Popen(
        [python, "-m", "distributed.cli.dask_worker", "--scheduler-file", str(sched_file),
         "--nthreads", "1", "--resources", "cpus=1", "--no-dashboard", *tls],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    (tmp_path / "Snakefile").write_text(
        f'rule a:\n    output: "a.txt"\n    shell: "echo ok > {{output}} # {no_leftovers}"\n'
    )

    def attach(*args: str, extra: dict[str, str] | None = None) -> tuple[int, str]:
        (tmp_path / "a.txt").unlink(missing_ok=True)
        done = subprocess.run(
            [str(VENV_BIN / "snakemake"), "--executor", "dask-slurm", "--jobs", "1",
             "--dask-slurm-cluster", "attach", "--dask-slurm-scheduler-file", str(sched_file),
             *args],
            cwd=tmp_path, env={**env, **(extra or {})}, capture_output=True, text=True,
            timeout=240,
        )  # fmt: skip
        return done.returncode, done.stdout + done.stderr

    try:
        eventually("the scheduler file", sched_file.exists, 60, 0.1, still_running(scheduler))
        assert json.loads(sched_file.read_text())["address"].startswith("tls://")
        # Without credentials: one message saying how to give them, at once.
        code, out = attach()
        assert code != 0 and "uses TLS, and no credentials to connect with" in out, out
        assert "--dask-slurm-tls-ca-file" in out and "distributed.comm.tls.ca-file" in out
        # With the settings.
        code, out = attach(
            "--dask-slurm-tls-ca-file", str(tmp_path / "site.pem"),
            "--dask-slurm-tls-cert", str(tmp_path / "site.pem"),
            "--dask-slurm-tls-key", str(tmp_path / "site.key"),
        )  # fmt: skip
        assert code == 0 and (tmp_path / "a.txt").read_text() == "ok\n", out
        assert "does not use TLS" not in out
        # With the user's Dask configuration (here through its environment variables).
        code, out = attach(
            extra={
                "DASK_DISTRIBUTED__COMM__TLS__CA_FILE": str(tmp_path / "site.pem"),
                "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT": str(tmp_path / "site.pem"),
                "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY": str(tmp_path / "site.key"),
            }
        )
        assert code == 0 and (tmp_path / "a.txt").read_text() == "ok\n", out
        # A file that is not there is named before anything connects.
        code, out = attach("--dask-slurm-tls-cert", str(tmp_path / "missing.pem"))
        assert code != 0 and "missing.pem: the file does not exist or cannot be read" in out
    finally:
        for p in (worker, scheduler):
            p.terminate()
            p.wait(30)
