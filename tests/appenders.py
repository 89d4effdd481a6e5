"""Checks for the ``appenders`` workflow: every output whole and from one copy of its job,
and no two copies of a job alive at the same time (see tests/workflows/appenders)."""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from snakemake_executor_plugin_dask_slurm.worker import proctree
from tests.conftest import live_processes
from tests.waiting import eventually

#: The file that holds the jobs (:func:`holding`).
HOLD = "hold"


@dataclass
class Copy:
    """One run of one job: its shell's pid, and the times of its first and last event."""

    job: int
    pid: int
    first: float
    last: float
    ended: bool


def copies(workdir: Path) -> dict[int, list[Copy]]:
    """Every copy of every job that started, from events.log."""
    found: dict[tuple[int, int], Copy] = {}
    for line in (workdir / "events.log").read_text().splitlines():
        kind, job, pid, when = line.split()
        key = (int(job), int(pid))
        copy = found.setdefault(key, Copy(int(job), int(pid), float(when), float(when), False))
        copy.last = max(copy.last, float(when))
        copy.ended = copy.ended or kind == "end"
    by_job: dict[int, list[Copy]] = defaultdict(list)
    for copy in found.values():
        by_job[copy.job].append(copy)
    return dict(by_job)


def interrupted(workdir: Path) -> set[int]:
    """The jobs of which a copy started and did not end (they were running at a fault)."""
    return {job for job, runs in copies(workdir).items() if any(not c.ended for c in runs)}


def lost_lines(output: str, worker: str) -> list[tuple[int, int]]:
    """The plugin's one line per lost worker named ``worker`` (a regular expression):
    (running jobs run again, waiting jobs moved) of each."""
    found = []
    for line in output.splitlines():
        if re.search(rf"dask-slurm: worker {worker} (was killed|exited|stopped|is gone)", line):
            running = re.search(r"(\d+) running job\(s\) run again elsewhere", line)
            waiting = re.search(r"(\d+) waiting job\(s\) moved to other workers", line)
            found.append((int(running[1]) if running else 0, int(waiting[1]) if waiting else 0))
    return found


def check_outputs(
    workdir: Path, count: int, steps: int, skip: tuple[int, ...] = (), pad: int = 0
) -> None:
    """Every output (but ``skip``) holds all lines of one copy that ended, nothing else
    (each line followed by ``pad`` x's, the workflow's config of that name)."""
    tail = f" {'x' * pad}" if pad else ""
    runs = copies(workdir)
    for i in range(count):
        path = workdir / f"out/{i}.txt"
        if i in skip:
            assert not path.exists(), f"{path} exists"
            continue
        lines = path.read_text().splitlines()
        pids = {line.split()[2] for line in lines}
        assert len(pids) == 1, f"{path} mixes copies {pids}: {lines}"
        pid = pids.pop()
        assert lines == [f"{i} {k} {pid}{tail}" for k in range(1, steps + 1)], f"{path}: {lines}"
        assert any(c.pid == int(pid) and c.ended for c in runs[i]), f"{path}: copy did not end"


def check_never_two_at_once(workdir: Path) -> None:
    """No two copies of a job were alive at the same time (by their logged events)."""
    for job, runs in copies(workdir).items():
        runs.sort(key=lambda c: c.first)
        for before, after in itertools.pairwise(runs):
            assert before.last < after.first, f"job {job}: copies overlap: {before} {after}"


def started(workdir: Path) -> int:
    log = workdir / "events.log"
    return log.read_text().count("start ") if log.exists() else 0


def worker_pids(name: str, where: str) -> list[int]:
    """Live ``dask worker`` processes named ``name`` whose command line mentions ``where``;
    not a worker's own fork that has not yet become the job it starts (it still shows the
    worker's command line for a moment)."""
    found = [
        pid
        for pid, cmd in live_processes("no-token", where)
        if "distributed.cli.dask_worker" in cmd and f"--name {name} " in cmd
    ]
    table = proctree.scan()
    return [pid for pid in found if pid in table and table[pid].ppid not in found]


def children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] not in ("Z", "X"):
                found.append(int(entry))
    return found


def alive(pids: list[int]) -> list[int]:
    left = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            left.append(pid)
    return left


def kill_worker_when_busy(
    proc: subprocess.Popen[str],
    workdir: Path,
    find_worker: Callable[[], int],
    jobs: int = 2,
    sig: signal.Signals = signal.SIGKILL,
) -> tuple[int, list[int]]:
    """Once ``jobs`` jobs started and the worker runs one, send it ``sig`` (SIGKILL, or
    SIGSTOP for a worker that hangs). Returns its pid and the job processes it had (its
    children), which must all be gone soon after.

    The worker is stopped first (it then starts no job and reports nothing) until each job
    it started has logged its start, so that the jobs it had are exactly the copies that
    started there: the plugin's count of its running jobs is then :func:`interrupted`'s,
    provided none of them can end before they are ended with the worker (see
    :func:`holding`)."""
    deadline = time.monotonic() + 120
    while True:
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, "jobs never started"
        if started(workdir) >= jobs:
            worker = find_worker()
            if children(worker):
                break
        time.sleep(0.1)
    os.kill(worker, signal.SIGSTOP)
    try:
        eventually("the worker's jobs logged their start", lambda: settled(worker, workdir), 30)
    except AssertionError:
        os.kill(worker, signal.SIGCONT)
        raise
    jobs_of_worker = children(worker)
    if sig != signal.SIGSTOP:
        os.kill(worker, sig)
    return worker, jobs_of_worker


def settled(worker: int, workdir: Path) -> bool:
    """Whether every job the (stopped) worker started is a shell that logged its start, and
    none of its forks is still on its way to becoming a job."""
    table = proctree.scan()
    logged = {int(line.split()[2]) for line in _events(workdir) if line.startswith("start ")}
    for pid in proctree.descendants([worker], table):
        if pid == worker or not table[pid].alive:
            continue
        if proctree.job_marker(pid) is None:
            if "distributed.cli.dask_worker" in _cmdline(pid):
                return False  # a fork of the worker, not yet the job it starts
        elif proctree.job_marker(table[pid].ppid) is None and pid not in logged:
            return False  # a job's shell that has not yet logged its start
    return True


def _events(workdir: Path) -> list[str]:
    log = workdir / "events.log"
    return log.read_text().splitlines() if log.exists() else []


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@contextmanager
def holding(workdir: Path) -> Iterator[str]:
    """The ``hold=`` config for the workflow: while inside, no job of it ends (each waits
    after its last step), so that a fault lands on jobs none of which can end before it,
    however slow the machine. Leaving (or :func:`release`) lets them end."""
    path = workdir / HOLD
    path.touch()
    try:
        yield f"hold={path}"
    finally:
        release(workdir)


def release(workdir: Path) -> None:
    """Let the jobs held by :func:`holding` end."""
    (workdir / HOLD).unlink(missing_ok=True)


def sleeping_in(directory: Path) -> list[int]:
    """Live ``sleep 300`` processes working in ``directory`` (a test's daemons)."""
    found = []
    for pid in alive([int(p) for p in os.listdir("/proc") if p.isdigit()]):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            cwd = Path(f"/proc/{pid}/cwd").resolve()
        except OSError:
            continue
        if cmd[:2] == [b"sleep", b"300"] and cwd == directory.resolve():
            found.append(pid)
    return found
