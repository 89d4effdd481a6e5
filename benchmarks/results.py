"""One benchmark run's result, and the results files (results.json, samples.json).

``results.json`` holds every run's figures plus the machine they came from; it is small
enough to commit. ``samples.json`` holds the per-job latency samples the latency plot is
drawn from (large at N = 10,000).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

PLUGIN_PACKAGE = "snakemake_executor_plugin_dask_slurm"
RESULTS_FILE = "results.json"
SAMPLES_FILE = "samples.json"
PACKAGES = (
    "snakemake",
    "snakemake-interface-executor-plugins",
    "dask",
    "distributed",
    "snakemake-executor-plugin-dask-slurm",
    "snakemake-executor-plugin-slurm-jobstep",
    "pulp",
)


@dataclass
class RunResult:
    workload: str  # "thin" or "farm"
    rules: int
    contender: str
    repeat: int
    status: str  # "ok", "failed: ...", "timed out after N s", "skipped: ..."
    argv: list[str] = field(default_factory=list)
    wall_seconds: float | None = None
    outputs_expected: int = 0
    outputs_correct: int = 0
    snakemake_peak_rss_mb: float | None = None
    scheduler_peak_rss_mb: float | None = None
    snakemake_cpu_seconds: float | None = None
    scheduler_cpu_seconds: float | None = None
    bringup_seconds: float | None = None
    cluster_start_seconds: float | None = None
    teardown_seconds: float | None = None
    cluster_close_seconds: float | None = None
    slots: int | None = None
    #: name -> {"count", "p50_ms", "p99_ms", "max_ms"}
    latency: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: where the wall time went (analysis.phases)
    phases: dict[str, float] | None = None
    makespan_seconds: float | None = None
    ideal_makespan_seconds: float | None = None
    leftovers: list[str] = field(default_factory=list)
    ran_twice: int = 0
    noticed_twice: int = 0
    profiled: bool = False
    #: the whole machine's CPU per job by process class (cpu_table.summarize)
    machine_cpu: dict[str, Any] | None = None
    #: git revision and a hash of the plugin's sources when the run started
    plugin_revision: str = ""
    log: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def run_id(self) -> str:
        return f"{self.workload}-{self.rules}-{self.contender}-r{self.repeat}"

    @property
    def rules_per_second(self) -> float | None:
        if not self.ok or not self.wall_seconds:
            return None
        return self.rules / self.wall_seconds


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, timeout=10
    ).stdout.strip()


def _git_revision(repo: Path) -> str:
    try:
        rev = _git(repo, "rev-parse", "--short", "HEAD")
        dirty = _git(repo, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return rev + (" (with uncommitted changes)" if dirty else "")


def plugin_revision(repo: Path) -> str:
    """``<git revision> src:<hash of the plugin's *.py>``: tells runs of different code apart."""
    digest = hashlib.sha1()
    for path in sorted((repo / PLUGIN_PACKAGE).glob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return f"{_git_revision(repo).split()[0]} src:{digest.hexdigest()[:10]}"


def _memory_gib() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    return 0.0


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info(repo: Path) -> dict[str, Any]:
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": _cpu_model(),
        "memory_gib": _memory_gib(),
        "kernel": platform.release(),
        "os": platform.freedesktop_os_release().get("PRETTY_NAME", platform.system()),
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "packages": {name: _version(name) for name in PACKAGES},
        "git_revision": _git_revision(repo),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def save(
    out: Path,
    meta: dict[str, Any],
    results: list[RunResult],
    samples: dict[str, dict[str, list[float]]],
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    data = {"meta": meta, "runs": [asdict(r) for r in results]}
    (out / RESULTS_FILE).write_text(json.dumps(data, indent=1) + "\n")
    (out / SAMPLES_FILE).write_text(json.dumps(samples) + "\n")


def load(
    out: Path,
) -> tuple[dict[str, Any], list[RunResult], dict[str, dict[str, list[float]]]]:
    data = json.loads((out / RESULTS_FILE).read_text())
    results = [RunResult(**r) for r in data["runs"]]
    samples_path = out / SAMPLES_FILE
    samples = json.loads(samples_path.read_text()) if samples_path.exists() else {}
    return data["meta"], results, samples
