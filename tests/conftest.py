"""Shared test fixtures: run real Snakemake on real workflows, and police processes.

Every end-to-end test runs the plugin for real (Snakemake, Dask scheduler and workers as
processes). After each one, no process the plugin starts (scheduler, workers, node
workers, job commands marked with the test's token) may be left running.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from snakemake_executor_plugin_dask_slurm.warm import ZYGOTE_MODULE
from snakemake_executor_plugin_dask_slurm.worker import SUPERVISOR_MODULE

WORKFLOWS = Path(__file__).parent / "workflows"
VENV_BIN = Path(sys.executable).parent
#: Command-line fragments of every process kind the plugin starts.
PLUGIN_MARKERS = (
    "distributed.cli.dask_scheduler",
    "distributed.cli.dask_worker",
    SUPERVISOR_MODULE,
    ZYGOTE_MODULE,  # the warm process, its servers and warm jobs (forks of it)
)

pytest_plugins = ["tests.slurm_cluster.fixtures"]


def _cmdline(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _state(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


def _cwd(pid: str) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


def live_processes(token: str, tmp_path: str) -> list[tuple[int, str]]:
    """Live (non-zombie) processes of one test: carrying its token, or a plugin process
    working under its tmp_path (named on its command line, or its working directory: a
    local worker started before its options came names no path)."""
    found = []
    me = os.getpid()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        cmd = _cmdline(pid)
        plugin = any(m in cmd for m in PLUGIN_MARKERS)
        cwd = _cwd(pid)
        under = tmp_path in cmd or cwd == tmp_path or cwd.startswith(tmp_path + "/")
        ours = token in cmd or (plugin and under)
        if ours and _state(pid) not in ("Z", "X"):
            found.append((int(pid), cmd))
    return found


def wait_until_gone(token: str, tmp_path: str, timeout: float = 15.0) -> list[tuple[int, str]]:
    deadline = time.monotonic() + timeout
    while True:
        left = live_processes(token, tmp_path)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def kill_all(procs: list[tuple[int, str]]) -> None:
    for pid, _ in procs:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@dataclass
class Run:
    returncode: int
    output: str

    def __str__(self) -> str:
        return f"exit {self.returncode}\n{self.output}"


@dataclass
class Workflow:
    """A copy of one of tests/workflows/<name> in a temporary directory."""

    path: Path
    token: str

    def snakemake(self, *args: str, timeout: float = 240, env: dict[str, str] | None = None) -> Run:
        argv = [str(VENV_BIN / "snakemake"), "--executor", "dask-slurm", *args]
        proc = subprocess.run(
            argv,
            cwd=self.path,
            env=self.env(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            timeout=timeout,
            text=True,
        )
        return Run(proc.returncode, proc.stdout)

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("SLURM_JOB_ID", None)
        env["DASK_SLURM_TEST_TOKEN"] = self.token
        env.update(extra or {})
        return env

    def read(self, name: str) -> str:
        return (self.path / name).read_text()


@pytest.fixture
def no_leftovers(tmp_path: Path) -> Iterator[str]:
    """A unique token for the test; fails the test if its processes are left running.

    Its processes: the plugin's (scheduler, workers) started for a workflow under the
    test's tmp_path, and every process whose command line carries the token (jobs).
    """
    token = f"dasktok{uuid.uuid4().hex[:10]}"
    yield token
    left = wait_until_gone(token, str(tmp_path))
    kill_all(left)
    assert not left, f"processes left running after the test: {left}"


@pytest.fixture
def workflow(tmp_path: Path, no_leftovers: str, request: pytest.FixtureRequest) -> Workflow:
    """The workflow named by the test's ``@pytest.mark.workflow(name)`` marker."""
    marker = request.node.get_closest_marker("workflow")
    name = marker.args[0] if marker else "features"
    dest = tmp_path / name
    shutil.copytree(WORKFLOWS / name, dest)
    return Workflow(dest, no_leftovers)


#: Test tiers by directory: tests/unit is pure (milliseconds: no process, no network),
#: tests/component starts real processes or an in-process Dask; the rest are end to end.
TIERS = {"unit": "unit", "component": "component"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).relative_to(Path(__file__).parent).parts
        tier = TIERS.get(parts[0]) if len(parts) > 1 else None
        if tier:
            item.add_marker(tier)
