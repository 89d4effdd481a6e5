"""Run one contender's command and measure it from outside: wall time, peak RSS, CPU.

The command runs in its own session with its output in a log file. While it runs, a
poller reads, every ``POLL_SECONDS``:

* the Snakemake process (the interpreter running the wrapper script, so it may sit
  below ``salloc`` or ``py-spy``) and the Dask scheduler among its descendants (found by
  ``distributed.cli.dask_scheduler`` in its command line): each one's ``VmHWM`` (the
  kernel's own peak-RSS high-water mark, so a short peak between polls is not missed)
  and its CPU time;
* every long-lived process it started (scheduler, workers, srun steps), so that any
  left running afterwards is reported (and ended).

Wall time is taken by a thread blocked in ``wait()``, not by the poller. A command that
outlives its timeout gets SIGINT (Snakemake then cancels its jobs and shuts its executor
down), then, ``STOP_GRACE`` seconds later, SIGKILL for everything it started.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from snakemake_executor_plugin_dask_slurm.worker import SUPERVISOR_MODULE

if TYPE_CHECKING:  # run.py imports this module as "measure", wide.py as "benchmarks.measure"
    from machine_cpu import CpuSampler

POLL_SECONDS = 0.2
#: Poll rounds between scans of the whole process tree (a scan costs more than a poll).
SCAN_EVERY = 5
STOP_GRACE = 30.0
#: A run is projected from its progress (outputs written) every PROJECT_EVERY seconds,
#: and stopped early once, PROJECT_AFTER seconds in, it needs over PROJECT_MARGIN times
#: the timeout at its rate so far (a margin, as the rate may still pick up).
PROJECT_AFTER = 90.0
PROJECT_EVERY = 10.0
PROJECT_MARGIN = 1.5
LEFTOVER_GRACE = 15.0
SCHEDULER_MARKER = "distributed.cli.dask_scheduler"
TRACKED_MARKERS = (
    SCHEDULER_MARKER,
    "distributed.cli.dask_worker",
    SUPERVISOR_MODULE,
)


@dataclass
class Peak:
    """One watched process: its highest VmHWM and its latest CPU time."""

    pid: int | None = None
    rss_mb: float | None = None
    cpu_seconds: float | None = None

    def poll(self) -> None:
        if self.pid is None:
            return
        hwm = read_vmhwm_kb(self.pid)
        if hwm is not None:
            self.rss_mb = max(self.rss_mb or 0.0, hwm / 1024)
        with contextlib.suppress(psutil.Error):
            times = psutil.Process(self.pid).cpu_times()
            self.cpu_seconds = times.user + times.system


@dataclass
class Measured:
    returncode: int | None
    wall_seconds: float
    timed_out: bool
    #: set when the run was stopped early because it could not finish in time
    projected_seconds: float | None
    snakemake: Peak
    scheduler: Peak
    leftovers: list[str] = field(default_factory=list)
    #: time.time() at the launch and at the command's exit (the machine's CPU windows)
    launched_at: float = 0.0
    ended_at: float = 0.0
    #: CPU-s of every process below the command that was waited for (os.times' children):
    #: exact for a local run; a SLURM step's processes are not below it
    tree_cpu_seconds: float | None = None


def read_vmhwm_kb(pid: int) -> int | None:
    """The peak resident set size of ``pid`` in kB, from /proc; None if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cmdline(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:
        return ""


def runs_script(proc: psutil.Process, script: str) -> bool:
    """Whether ``proc`` is an interpreter running ``script`` (not e.g. salloc naming it)."""
    try:
        return proc.cmdline()[1:2] == [script]
    except psutil.Error:
        return False


def is_tracked(cmdline: str) -> bool:
    """A process the plugin starts and must stop: scheduler, worker, srun step."""
    program = os.path.basename(cmdline.split(" ", 1)[0])
    return program == "srun" or any(m in cmdline for m in TRACKED_MARKERS)


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


class Watcher:
    """Finds and polls the Snakemake process and the Dask scheduler below ``root``."""

    def __init__(self, root: int, snakemake_script: str):
        self.root = root
        self.script = snakemake_script
        self.snakemake = Peak()
        self.scheduler = Peak()
        self.tracked: dict[tuple[int, float], str] = {}
        self._rounds = 0

    def poll(self) -> None:
        if self.snakemake.pid is None:
            self.snakemake.pid = self._find_snakemake()
        if self.snakemake.pid is not None and self.scheduler.pid is None:
            self.scheduler.pid = self._find_scheduler(self.snakemake.pid)
        self.snakemake.poll()
        self.scheduler.poll()
        if self._rounds % SCAN_EVERY == 0:
            self._track()
        self._rounds += 1

    def _find_snakemake(self) -> int | None:
        with contextlib.suppress(psutil.Error):
            for proc in [psutil.Process(self.root), *_descendants(self.root)]:
                if runs_script(proc, self.script):
                    return proc.pid
        return None

    def _find_scheduler(self, pid: int) -> int | None:
        for proc in _descendants(pid):
            if SCHEDULER_MARKER in _cmdline(proc):
                return proc.pid
        return None

    def _track(self) -> None:
        for proc in _descendants(self.root):
            cmd = _cmdline(proc)
            if is_tracked(cmd):
                with contextlib.suppress(psutil.Error):
                    self.tracked[(proc.pid, proc.create_time())] = cmd

    def alive_tracked(self) -> list[tuple[psutil.Process, str]]:
        alive = []
        for (pid, created), cmd in self.tracked.items():
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(pid)
                if proc.create_time() == created and proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append((proc, cmd))
        return alive


def _kill_tree(root: int, watcher: Watcher) -> None:
    procs = _descendants(root) + [p for p, _ in watcher.alive_tracked()]
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(root, signal.SIGKILL)
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()


def _stop(proc: subprocess.Popen[bytes], watcher: Watcher, done: threading.Event) -> None:
    target = watcher.snakemake.pid or proc.pid
    with contextlib.suppress(ProcessLookupError):
        os.kill(target, signal.SIGINT)
    if not done.wait(STOP_GRACE):
        _kill_tree(proc.pid, watcher)
        done.wait(STOP_GRACE)


def _leftovers(watcher: Watcher) -> list[str]:
    deadline = time.monotonic() + LEFTOVER_GRACE
    while watcher.alive_tracked() and time.monotonic() < deadline:
        time.sleep(0.2)
    left = watcher.alive_tracked()
    for proc, _ in left:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    return [f"{proc.pid}: {cmd[:200]}" for proc, cmd in left]


@dataclass
class Progress:
    """How far a run is: ``done()`` of ``total`` outputs written."""

    done: Callable[[], int]
    total: int
    first_output: float | None = None  # seconds into the run when outputs first appeared

    def projected(self, elapsed: float) -> float | None:
        """Seconds the whole run would take at its rate since its first output.

        None until outputs appear: with ``--jobs unlimited`` Snakemake submits every job
        before it looks at any result, and outputs appear only after that.
        """
        done = self.done()
        if not done:
            return None
        if self.first_output is None:
            self.first_output = elapsed
            return None
        if done >= self.total:
            return elapsed
        rate = done / max(elapsed - self.first_output, 1e-3)
        return self.first_output + self.total / rate


def run_measured(
    argv: Sequence[str],
    cwd: Path,
    env: Mapping[str, str],
    log_path: Path,
    timeout: float,
    snakemake_script: str,
    progress: Progress | None = None,
    on_timeout: Callable[[], None] | None = None,
    sampler: CpuSampler | None = None,
) -> Measured:
    """Run ``argv`` to completion (or ``timeout``) and measure it.

    With ``progress``, a run whose rate so far projects past ``timeout`` is stopped
    early (a hopeless run need not use up the whole limit); the projection is reported.
    With ``sampler`` (machine_cpu.CpuSampler), the machine's CPU is sampled from just
    before the launch until the command's exit.
    """
    done = threading.Event()
    ended: list[float] = []
    ended_at: list[float] = []
    if sampler is not None:
        sampler.start()
    children_before = _children_cpu()
    with open(log_path, "wb") as log:
        launched_at = time.time()
        started = time.monotonic()
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait() -> None:
        proc.wait()
        ended.append(time.monotonic())
        ended_at.append(time.time())
        done.set()

    threading.Thread(target=wait, daemon=True).start()
    watcher = Watcher(proc.pid, snakemake_script)
    timed_out = False
    projected: float | None = None
    next_projection = started
    try:
        while not done.wait(POLL_SECONDS):
            watcher.poll()
            now = time.monotonic()
            if progress is not None and now > next_projection:
                next_projection = now + PROJECT_EVERY
                estimate = progress.projected(now - started)
                hopeless = estimate is not None and estimate > PROJECT_MARGIN * timeout
                if hopeless and now - started > PROJECT_AFTER:
                    projected = estimate
            if now - started > timeout or projected is not None:
                timed_out = True
                _stop(proc, watcher, done)
                if on_timeout is not None:
                    on_timeout()
                break
    except BaseException:  # interrupted: do not leave the run behind
        _stop(proc, watcher, done)
        raise
    done.wait()
    if sampler is not None:
        sampler.stop()
    tree_cpu = _children_cpu() - children_before
    wall = (ended[0] if ended else time.monotonic()) - started
    measured = Measured(
        proc.returncode,
        wall,
        timed_out,
        projected,
        watcher.snakemake,
        watcher.scheduler,
        _leftovers(watcher),
        launched_at,
        ended_at[0] if ended_at else time.time(),
        tree_cpu,
    )
    return measured


def _children_cpu() -> float:
    """CPU-s of this process's children (and theirs) that have been waited for."""
    times = os.times()
    return times.children_user + times.children_system
