"""One run's run directory at a time: a live run's claim stops a second run at once, a
dead run's claim is taken over, another host's is refused with what to remove."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from snakemake_executor_plugin_dask_slurm.clusters.run_dir import (
    LOCK_NAME,
    claim_run_dir,
    process_start,
    release_run_dir,
)
from snakemake_executor_plugin_dask_slurm.errors import DaskSlurmError


def write_claim(run_dir: Path, host: str, pid: int, start: str | None) -> None:
    (run_dir / LOCK_NAME).write_text(
        json.dumps({"host": host, "pid": pid, "start": start, "since": 0.0})
    )


def test_a_live_runs_claim_stops_a_second_run(tmp_path: Path) -> None:
    other = subprocess.Popen(["sleep", "30"])
    try:
        import socket

        write_claim(tmp_path, socket.gethostname(), other.pid, process_start(other.pid))
        with pytest.raises(DaskSlurmError) as caught:
            claim_run_dir(tmp_path)
        message = str(caught.value)
        assert message.startswith(f"Another run uses the run directory {tmp_path}: pid {other.pid}")
        assert "--dask-slurm-run-dir, or wait for the other to end." in message
    finally:
        other.kill()
        other.wait()
    # gone now: its claim is taken over, and given back
    path = claim_run_dir(tmp_path)
    assert json.loads(path.read_text())["pid"] == os.getpid()
    assert claim_run_dir(tmp_path) == path  # ours already
    release_run_dir(path)
    assert not path.exists()


def test_a_reused_pid_does_not_hold_a_claim(tmp_path: Path) -> None:
    import socket

    write_claim(tmp_path, socket.gethostname(), os.getppid(), "1")  # alive, but started later
    path = claim_run_dir(tmp_path)
    assert json.loads(path.read_text())["pid"] == os.getpid()


def test_another_hosts_claim_is_refused_with_the_file_to_remove(tmp_path: Path) -> None:
    write_claim(tmp_path, "elsewhere", 4242, "7")
    with pytest.raises(DaskSlurmError) as caught:
        claim_run_dir(tmp_path)
    assert "pid 4242 on elsewhere" in str(caught.value)
    assert f"if it is over, remove {tmp_path / LOCK_NAME}" in str(caught.value)
    release_run_dir(tmp_path / LOCK_NAME)  # not ours: kept
    assert (tmp_path / LOCK_NAME).exists()
