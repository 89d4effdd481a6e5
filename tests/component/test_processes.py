"""The managed-process contract, with real processes."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from snakemake_executor_plugin_dask_slurm.clusters.process import (
    ManagedProcess,
    Status,
    log_tail,
    read_scheduler_file,
    session_members,
    wait_for_scheduler_file,
)
from snakemake_executor_plugin_dask_slurm.errors import DaskSlurmError
from tests.waiting import eventually


def python(tmp_path: Path, code: str, name: str = "test process") -> ManagedProcess:
    return ManagedProcess(name, [sys.executable, "-c", code], tmp_path / f"{name}.log")


def test_status_log_and_exit(tmp_path: Path) -> None:
    proc = python(
        tmp_path, "print('hello'); import sys; print('\\x1b[31mred\\x1b[0m'); sys.exit(3)"
    )
    assert proc.status is Status.created
    proc.start()
    assert proc.proc is not None
    proc.proc.wait(10)
    assert proc.status is Status.exited and proc.returncode == 3
    assert proc.exit_description() == "exited with code 3"
    assert proc.tail() == "hello\nred"
    proc.close()
    assert proc.status is Status.closed


def test_close_kills_a_process_that_ignores_sigterm_and_its_children(tmp_path: Path) -> None:
    code = (
        "import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        "print('ready', flush=True); time.sleep(60)"
    )
    proc = python(tmp_path, code)
    proc.start()
    eventually("ready", lambda: "ready" in proc.tail(), 10, interval=0.02)
    started = time.monotonic()
    proc.close(timeout=0.5)
    assert time.monotonic() - started < 5
    assert proc.proc is not None and proc.proc.returncode == -9
    assert proc.exit_description() == "was killed by signal SIGKILL"


def test_start_failure_names_the_command(tmp_path: Path) -> None:
    proc = ManagedProcess("Dask scheduler", ["/no/such/python", "-m", "x"], tmp_path / "l.log")
    with pytest.raises(
        DaskSlurmError, match=r"Could not start the Dask scheduler: .*/no/such/python"
    ):
        proc.start()


@pytest.mark.parametrize(
    ("content", "address"),
    [
        ('{"address": "tcp://1.2.3.4:5"}', "tcp://1.2.3.4:5"),
        ('{"address": "tcp://1.2', None),  # half-written
        ("[]", None),
        ('{"address": ""}', None),
        ("", None),
    ],
)
def test_read_scheduler_file(tmp_path: Path, content: str, address: str | None) -> None:
    path = tmp_path / "s.json"
    path.write_text(content)
    assert read_scheduler_file(path) == address
    assert read_scheduler_file(tmp_path / "missing.json") is None


def test_wait_for_scheduler_file_reports_a_dead_scheduler_at_once(tmp_path: Path) -> None:
    proc = python(tmp_path, "import sys; print('port 8786 is already in use'); sys.exit(1)")
    proc.start()
    started = time.monotonic()
    with pytest.raises(DaskSlurmError, match="exited with code 1 before it was ready") as e:
        wait_for_scheduler_file(tmp_path / "s.json", proc, timeout=30)
    assert "port 8786 is already in use" in str(e.value)
    assert time.monotonic() - started < 10


def test_wait_for_scheduler_file_times_out_with_a_hint(tmp_path: Path) -> None:
    proc = python(tmp_path, "import time; time.sleep(30)")
    proc.start()
    try:
        with pytest.raises(DaskSlurmError, match=r"did not write .* within 0 s"):
            wait_for_scheduler_file(tmp_path / "s.json", proc, timeout=0.3)
    finally:
        proc.close(1)


def test_wait_for_scheduler_file_returns_the_address(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    code = (
        "import json, time; time.sleep(0.2); "
        f"open({str(path)!r}, 'w').write(json.dumps({{'address': 'tcp://h:1'}})); time.sleep(30)"
    )
    proc = python(tmp_path, code)
    proc.start()
    try:
        assert wait_for_scheduler_file(path, proc, timeout=20) == "tcp://h:1"
    finally:
        proc.close(1)
    assert json.loads(path.read_text())["address"] == "tcp://h:1"


def test_log_tail_unreadable(tmp_path: Path) -> None:
    assert log_tail(tmp_path / "none") == ""


def test_close_ends_the_session_even_after_its_leader_was_killed(tmp_path: Path) -> None:
    # Like a worker killed by the OOM killer: its job lives on in its own process group
    # (so killing the worker's group misses it) but in the worker's session.
    marker = tmp_path / "job.pid"
    code = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], "
        "process_group=0); "
        f"open({str(marker)!r}, 'w').write(str(p.pid)); time.sleep(60)"
    )
    proc = python(tmp_path, code)
    proc.start()
    eventually("the job's pid", lambda: marker.exists() and marker.read_text(), 10, 0.02)
    job = int(marker.read_text())
    assert proc.proc is not None
    os.kill(proc.proc.pid, signal.SIGKILL)
    proc.proc.wait(5)
    assert job in session_members(proc.proc.pid)
    proc.close(timeout=1)
    pid = proc.proc.pid
    eventually("the job ended with its session", lambda: job not in session_members(pid), 5)
