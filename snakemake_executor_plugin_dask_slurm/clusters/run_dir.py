"""The run directory: usable (checked before anything is planned), and one run's at a time.

Two runs in one working directory are possible with Snakemake's ``--nolock``; they would
share the run directory's scheduler file and logs (the second truncating the first's
scheduler log, writing and then removing its scheduler file). So a run claims the run
directory when its cluster starts, with a small lock file naming its host, process and
that process's start time, and gives it back when the cluster closes. A second run
finds the claim and stops at once, naming the first run and ``--dask-slurm-run-dir``. A
claim whose process is gone (a run killed outright) is taken over; one from another host
cannot be checked from here and is refused with the path to remove if that run is over.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import DaskSlurmError
from ..report.detail import NAME as DETAIL_NAME
from ..report.detail import close_detail_log, open_detail_log

LOCK_NAME = "run.lock"


def check_run_dir(run_dir: Path) -> None:
    """Fail at once, naming the path and the reason, if the run directory is unusable
    (the scheduler file and every log go there)."""
    probe = run_dir / f".write-test-{os.getpid()}"
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise DaskSlurmError(
            f"Cannot use {run_dir} as the plugin's run directory (scheduler file and logs): "
            f"{e.strerror or e}{f' ({e.filename})' if e.filename else ''}. Choose a "
            "directory you can write that the nodes can read, with --dask-slurm-run-dir."
        ) from None


def process_start(pid: int) -> str | None:
    """When ``pid`` started (clock ticks since boot, from /proc), to tell it from a later
    process with the same pid; None if it does not run."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


@dataclass(frozen=True)
class Claim:
    host: str
    pid: int
    start: str | None
    since: float

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since))
        return f"pid {self.pid} on {self.host}, since {when}"


def read_claim(path: Path) -> Claim | None:
    try:
        data = json.loads(path.read_text())
        return Claim(str(data["host"]), int(data["pid"]), data.get("start"), float(data["since"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def live(claim: Claim, host: str) -> bool | None:
    """Whether the claiming run still runs: True/False on this host, None elsewhere."""
    if claim.host != host:
        return None
    start = process_start(claim.pid)
    return start is not None and (claim.start is None or start == claim.start)


def claim_run_dir(run_dir: Path) -> Path:
    """Claim ``run_dir`` for this run (see the module's docstring); the lock file, for
    :func:`release_run_dir`."""
    path = run_dir / LOCK_NAME
    host = socket.gethostname()
    ours = Claim(host, os.getpid(), process_start(os.getpid()), time.time())
    for _ in range(2):  # a claim taken over from a dead run, then once more
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            other = read_claim(path)
            if other is not None and (other.host, other.pid) == (host, os.getpid()):
                return path  # ours already
            running = live(other, host) if other is not None else False
            if running is False:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()  # a run that is gone: take over
                continue
            assert other is not None
            where = "" if running else f" (it cannot be checked from {host})"
            raise DaskSlurmError(
                f"Another run uses the run directory {run_dir}: {other.describe()}{where}. "
                "Two runs in one directory (Snakemake's --nolock) would overwrite each "
                "other's scheduler file and logs. Give this run its own with "
                "--dask-slurm-run-dir, or wait for the other to end"
                + ("." if running else f"; if it is over, remove {path}.")
            ) from None
        with os.fdopen(fd, "w") as f:
            json.dump(ours.__dict__, f)
        return path
    raise DaskSlurmError(f"Could not claim the run directory {run_dir} ({path} keeps coming back).")


def release_run_dir(path: Path) -> None:
    """Give back this run's claim (only if it is still ours)."""
    claim = read_claim(path)
    if claim is not None and (claim.host, claim.pid) == (socket.gethostname(), os.getpid()):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


@dataclass
class RunFiles:
    """What a run holds in its run directory while its cluster runs: the claim on it, and
    its detail log (:mod:`..report.detail`)."""

    claim: Path
    detail: logging.Handler

    @classmethod
    def open(cls, run_dir: Path) -> RunFiles:
        claim = claim_run_dir(run_dir)
        try:
            return cls(claim, open_detail_log(run_dir))
        except BaseException:
            release_run_dir(claim)
            raise

    @property
    def detail_log(self) -> Path:
        return self.claim.parent / "logs" / DETAIL_NAME

    def close(self) -> None:
        close_detail_log(self.detail)
        release_run_dir(self.claim)
