"""The status file, line and command on real local runs (tests/workflows/status): a live
run queried mid-way from another process, with its figures checked against the outputs
and held jobs that exist; the same run once it succeeded; a failed run; and a run whose
Snakemake was killed with -9."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.appenders import holding, release
from tests.conftest import VENV_BIN, Workflow
from tests.waiting import eventually, still_running

pytestmark = pytest.mark.e2e

#: The worker's slots: the 2 fast and the 4 held jobs of the live run all fit, whatever
#: order they start in (with fewer, the held jobs could take every slot first).
SLOTS = 6
HELD = 4
STATUS = Path(".snakemake/dask-slurm/status.json")


def status(workflow: Workflow, *args: str) -> tuple[int, str]:
    """The status command, from another process, as a user on another shell runs it."""
    done = subprocess.run(
        [sys.executable, "-m", "snakemake_executor_plugin_dask_slurm", "status",
         str(workflow.path), *args],
        capture_output=True, text=True, timeout=60, cwd="/",
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def figures(workflow: Workflow) -> dict[str, Any]:
    code, out = status(workflow, "--json")
    return json.loads(out) if out.startswith("{") else {"unreadable": out, "code": code}


@contextmanager
def started(workflow: Workflow, *config: str) -> Iterator[subprocess.Popen[str]]:
    argv = [
        str(VENV_BIN / "snakemake"), "--executor", "dask-slurm", "--jobs", "8", "-q",
        "--dask-slurm-workers", "1", "--dask-slurm-cpus", str(SLOTS),
        "--dask-slurm-status-interval", "1", "--dask-slurm-no-usage-report",
        "--config", f"token={workflow.token}", *config,
    ]  # fmt: skip
    proc = subprocess.Popen(
        argv, cwd=workflow.path, env=workflow.env(), text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        yield proc
    finally:
        release(workflow.path)
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=60)


def present(workflow: Workflow, name: str) -> set[str]:
    return {p.name for p in (workflow.path / name).glob("*")}


@pytest.mark.workflow("status")
def test_a_live_run_then_its_success(workflow: Workflow) -> None:
    with holding(workflow.path) as hold, started(workflow, hold, "count=6", "fast=2") as proc:
        check = still_running(proc)
        eventually(
            "2 outputs and 4 held jobs",
            lambda: present(workflow, "out") == {"0.txt", "1.txt"}
            and len(present(workflow, "started")) == 6,
            120, check=check,
        )  # fmt: skip
        seen = time.time()
        data = eventually(
            "a status file written after that, with both done",
            lambda: (d := figures(workflow)).get("updated_at", 0) > seen
            and d["jobs"]["done"] == 2 and d["jobs"]["running"] == HELD and d,
            30, interval=0.2, check=check,
        )  # fmt: skip
        held = present(workflow, "started") - {
            p.removesuffix(".txt") for p in present(workflow, "out")
        }
        # Exact: done are the outputs present (nothing else can end while jobs are held);
        # running the jobs held; waiting only the target rule `all`.
        assert data["jobs"] == {
            "done": 2, "total": 7, "running": len(held), "waiting": 1, "in_flight": 4,
            "succeeded": 2, "failed": 0, "lost": 0, "stopped": 0,
        }, data  # fmt: skip
        workers = {"alive": 1, "slots": SLOTS, "busy_share": HELD / SLOTS, "worker_jobs": None}
        assert data["workers"] == workers, data
        assert (data["state"], data["host"], data["pid"]) == (
            "running",
            os.uname().nodename,
            proc.pid,
        )
        assert data["cluster"] == "local" and data["scheduler"].startswith("tls://")
        assert "token" not in json.dumps(data), data  # the link with it only in its own file
        assert Path(data["dashboard_link_file"]).name == "dashboard-link"
        assert stat.S_IMODE((workflow.path / STATUS).stat().st_mode) == 0o600
        code, said = status(workflow)
        assert code == 0, said
        assert f"live (process {proc.pid} checked on this host)" in said, said
        assert "2 of 7 jobs done, 4 running, 1 waiting, 0 failed, 0 lost" in said, said
        release(workflow.path)
        output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, output
    assert "dask-slurm: 2 of 7 jobs done, 4 running, 1 waiting" in output, output  # under -q
    assert "7 of 7 jobs done" in output and "the run ended: success" in output, output
    code, said = status(workflow)
    assert code == 0 and "no run is live; the last run ended: success" in said, said
    data = figures(workflow)
    assert data["state"] == "success" and data["jobs"]["done"] == data["jobs"]["total"] == 7


@pytest.mark.workflow("status")
def test_a_failed_run(workflow: Workflow) -> None:
    with started(workflow, "count=3", "fast=3", "fail=1") as proc:
        output, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0, output
    code, said = status(workflow)
    assert code == 1 and "the last run ended: failed" in said, said
    data = figures(workflow)
    assert data["state"] == "failed" and data["jobs"]["failed"] == 1, data


@pytest.mark.workflow("status")
def test_a_run_killed_with_9_is_not_shown_as_running(workflow: Workflow) -> None:
    with holding(workflow.path) as hold, started(workflow, hold, "count=2", "fast=0") as proc:
        eventually(
            "2 jobs held, and said in the status file",
            lambda: len(present(workflow, "started")) == 2
            and figures(workflow).get("jobs", {}).get("running") == 2,
            120, interval=0.2, check=still_running(proc),
        )  # fmt: skip
        code, said = status(workflow)
        assert code == 0 and "live" in said, said
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        code, said = status(workflow)
        assert code == 1, said
        assert "no run is live: the last run is gone without saying how it ended" in said, said
        assert "last seen" in said and "2 running" in said, said
        assert figures(workflow)["state"] == "running"  # as it was left: the pid tells


@pytest.mark.workflow("status")
def test_an_interrupted_run(workflow: Workflow) -> None:
    """Ctrl-C: the held jobs are stopped, not failed; the run ended interrupted."""
    with holding(workflow.path) as hold, started(workflow, hold, "count=2", "fast=0") as proc:
        eventually(
            "2 jobs held, and said in the status file",
            lambda: figures(workflow).get("jobs", {}).get("running") == 2,
            120, interval=0.2, check=still_running(proc),
        )  # fmt: skip
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=120)
    code, said = status(workflow)
    assert code == 1 and "the last run ended: interrupted" in said, said + output
    jobs = figures(workflow)["jobs"]
    assert (jobs["failed"], jobs["stopped"], jobs["done"]) == (0, 2, 0), jobs
