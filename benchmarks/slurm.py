"""The project's SLURM test cluster, as the benchmark uses it: is it up, its env, start/stop.

Everything goes through ``testcluster/cluster.py`` (status, env, start, stop);
this module never touches the cluster's daemons itself.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CLUSTER_SCRIPT = REPO / "testcluster" / "cluster.py"
START_HINT = f"start it with: {sys.executable} {CLUSTER_SCRIPT.relative_to(REPO)} start"
#: Variables that would point salloc at another cluster or job.
FOREIGN_PREFIXES = ("SLURM_", "SBATCH_", "SRUN_", "SALLOC_")
_NODE = re.compile(r"\b(n\d+) \((\d+) CPUs")


@dataclass(frozen=True)
class TestCluster:
    env: dict[str, str]  # this process's environment, cleaned, plus SLURM_CONF
    node_cpus: tuple[int, ...]

    @property
    def cpus(self) -> int:
        return sum(self.node_cpus)


def _cluster(command: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CLUSTER_SCRIPT), command],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def parse_exports(text: str) -> dict[str, str]:
    """``export A=b`` lines (shell-quoted) -> {"A": "b"}."""
    found = {}
    for line in text.splitlines():
        words = shlex.split(line)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            name, value = words[1].split("=", 1)
            found[name] = value
    return found


def clean_environment(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if not k.startswith(FOREIGN_PREFIXES)}


def find() -> tuple[TestCluster | None, str]:
    """The running test cluster, or None and why it cannot be used."""
    if not CLUSTER_SCRIPT.exists():
        return None, f"SLURM test cluster script {CLUSTER_SCRIPT} not found"
    status = _cluster("status", 30)
    if status.returncode != 0:
        state = "broken" if status.returncode == 1 else "not running"
        return None, f"SLURM test cluster {state} ({START_HINT}, or pass --start-cluster)"
    exports = parse_exports(_cluster("env", 30).stdout)
    if "SLURM_CONF" not in exports:
        return None, "SLURM test cluster printed no SLURM_CONF in 'cluster.py env'"
    env = clean_environment(os.environ) | exports
    cpus = tuple(int(c) for _, c in _NODE.findall(status.stdout))
    return TestCluster(env, cpus), ""


def start() -> str:
    """Start the test cluster; returns "" or the error it printed."""
    proc = _cluster("start", 300)
    return "" if proc.returncode == 0 else (proc.stderr or proc.stdout).strip()


def stop() -> str:
    proc = _cluster("stop", 120)
    return "" if proc.returncode == 0 else (proc.stderr or proc.stdout).strip()


#: salloc gives up if the allocation is not granted within this many seconds.
SALLOC_IMMEDIATE = 60


def salloc_argv(job_name: str, salloc_args: tuple[str, ...], argv: list[str]) -> list[str]:
    return [
        "salloc",
        f"--job-name={job_name}",
        f"--immediate={SALLOC_IMMEDIATE}",
        *salloc_args,
        *argv,
    ]


def queued_jobs(env: Mapping[str, str]) -> list[str]:
    """Ids of the jobs in the test cluster's queue (anyone's)."""
    proc = subprocess.run(
        ["squeue", "-h", "-o", "%i"],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return proc.stdout.split()


def wait_until_idle(env: Mapping[str, str], timeout: float) -> list[str]:
    """Wait until no job is queued or running; returns the jobs still there at the end.

    Waiting in salloc's queue would count as run time, and other users' test fixtures
    may cancel every job they find on this shared cluster, so runs start on an idle one.
    """
    deadline = time.monotonic() + timeout
    while (jobs := queued_jobs(env)) and time.monotonic() < deadline:
        time.sleep(1.0)
    return jobs


def srun_shim(directory: Path, env: Mapping[str, str]) -> Path:
    """A directory holding an ``srun`` that sets SLURM_CONF, then runs the real srun.

    slurm-jobstep removes every SLURM_* variable but the job's identity from the
    environment of the srun it starts per rule, SLURM_CONF included, so on a cluster
    found through SLURM_CONF (like the test cluster) that srun cannot find its
    configuration. Putting this directory first on PATH restores the variable; it adds
    one small shell per rule.
    """
    real = shutil.which("srun", path=env.get("PATH"))
    if real is None:
        raise FileNotFoundError("srun is not on PATH")
    directory.mkdir(parents=True, exist_ok=True)
    shim = directory / "srun"
    conf = shlex.quote(env["SLURM_CONF"])
    shim.write_text(f'#!/bin/sh\nexport SLURM_CONF={conf}\nexec {shlex.quote(real)} "$@"\n')
    shim.chmod(0o755)
    return directory


def scancel(job_name: str, env: Mapping[str, str]) -> None:
    """Cancel the benchmark's allocation by its unique name (after a timeout)."""
    subprocess.run(
        ["scancel", f"--name={job_name}"],
        env=dict(env),
        capture_output=True,
        timeout=30,
        check=False,
    )
