"""``python -m snakemake_executor_plugin_dask_slurm status [WORKDIR]`` (and
``dask-slurm-status``): the run's status file, read from any shell that sees the working
directory, a login node's included. Standard library only: no Snakemake, no Dask.

Exit status: 0 for a live run or one that succeeded; 1 for a run that failed, was
interrupted or is gone without a word (killed, crashed); 2 where there is no status file.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .status_file import RUNNING, STATUS_NAME, SUCCESS, progress_line, read_status, same_process

#: A file on another host counts as live while younger than this many of its intervals.
STALE_AFTER = 3
#: ... plus this many seconds (a shared filesystem's attribute cache, a busy host).
STALE_SLACK = 30.0


@dataclass(frozen=True)
class RunVerdict:
    """What the command says of the run, and its exit status."""

    live: bool
    how: str
    code: int


def _when(epoch: Any) -> str:
    if not isinstance(epoch, int | float):
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))


def judge(data: Mapping[str, Any], host: str, now: float, proc: Path = Path("/proc")) -> RunVerdict:
    """Live, or how it ended; a file left ``running`` by a process that is gone is a run
    that vanished (killed, e.g. with -9, or crashed, or its node lost)."""
    state = data.get("state")
    age = now - float(data.get("updated_at") or 0)
    if state != RUNNING:
        code = 0 if state == SUCCESS else 1
        return RunVerdict(False, f"no run is live; the last run ended: {state}", code)
    gone = (
        "no run is live: the last run is gone without saying how it ended (killed, e.g. "
        "with -9, or crashed, or its host lost); its figures are from "
        f"{age:.0f} s ago. Run the same command again to continue the workflow."
    )
    pid = int(data.get("pid") or 0)
    if data.get("host") == host:
        if same_process(pid, data.get("pid_start"), proc):
            return RunVerdict(True, f"live (process {pid} checked on this host)", 0)
        return RunVerdict(False, gone, 1)
    every = float(data.get("file_every") or 5.0)
    limit = STALE_AFTER * every + STALE_SLACK
    not_checked = (
        f"its process cannot be checked from {host}: judged by the file's age, "
        f"{age:.0f} s, against its refresh every {every:.0f} s"
    )
    if age <= limit:
        return RunVerdict(True, f"live on {data.get('host')} ({not_checked})", 0)
    return RunVerdict(False, f"{gone} ({not_checked})", 1)


def summary(data: Mapping[str, Any], verdict: RunVerdict) -> list[str]:
    """The human summary: who, what, where."""
    allocation = data.get("allocation") or {}
    job = f", SLURM job {allocation['job_id']}" if allocation.get("job_id") else ""
    lines = [
        f"dask-slurm run on {data.get('host')} (pid {data.get('pid')}{job}), "
        f"{data.get('cluster')} mode, started {_when(data.get('started_at'))}: {verdict.how}",
        f"{'now' if verdict.live else 'last seen'} ({_when(data.get('updated_at'))}): "
        + progress_line(data),
    ]
    if verdict.live and data.get("scheduler"):
        lines.append(f"scheduler: {data['scheduler']}")
    if verdict.live and data.get("dashboard"):
        link = data.get("dashboard_link_file")
        where = f" (the link with its token: {link})" if link else ""
        lines.append(f"dashboard: {data['dashboard']}{where}")
    if data.get("usage_report_dir"):
        lines.append(f"usage report: {data['usage_report_dir']} (written at the run's end)")
    return lines


def status_path(workdir: Path, run_dir: Path | None) -> Path:
    """The status file of the run in ``workdir`` (``run_dir``: --dask-slurm-run-dir's)."""
    base = run_dir if run_dir is not None else Path(".snakemake", "dask-slurm")
    return (base if base.is_absolute() else workdir / base) / STATUS_NAME


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="dask-slurm-status",
        description="Show the progress of the dask-slurm run in WORKDIR, from any shell.",
    )
    parser.add_argument("workdir", nargs="?", default=".", type=Path, metavar="WORKDIR")
    parser.add_argument("--json", action="store_true", help="print the status file as it is")
    parser.add_argument("--run-dir", type=Path, help="the run's --dask-slurm-run-dir, if set")
    args = parser.parse_args(argv)
    path = status_path(args.workdir.resolve(), args.run_dir)
    data = read_status(path)
    if data is None:
        print(
            f"no dask-slurm run found: {path} does not exist (or is not readable). A run "
            "writes it once its first job starts; pass the workflow's working directory "
            "(and --run-dir if the run had --dask-slurm-run-dir).",
            file=sys.stderr,
        )
        return 2
    verdict = judge(data, socket.gethostname(), time.time())
    if args.json:
        print(json.dumps(data, indent=1, sort_keys=True))
    else:
        print("\n".join(summary(data, verdict)))
    return verdict.code
