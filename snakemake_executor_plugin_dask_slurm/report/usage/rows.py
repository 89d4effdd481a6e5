"""The usage report's typed facts (pure): what the run tells the collector, and the one
row per job attempt that everything else is computed from."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, NamedTuple

from ...worker.wire import Usage, Way

#: How an attempt ended, in the report's words:
#: done: it succeeded; failed: its command failed (or it could not be started);
#: lost: its worker died under it (the plugin runs it again under a new key);
#: stopped: the run stopped it (landing before the time limit, SIGTERM, Ctrl-C, a broken
#: cluster); not-started: it was handed over (or refused at hand-over) and never ran.
Outcome = Literal["done", "failed", "lost", "stopped", "not-started"]

#: Every memory figure of the report is in MB, 10^6 bytes: the unit of Snakemake's
#: ``mem_mb`` (its ``mem_mib`` is the other one), which the suggestions compare with and
#: the suggested profile writes. The kernel gives peak RSS in KiB (``ru_maxrss``).
BYTES_PER_MB = 1_000_000


def mb_of_kib(kib: float) -> float:
    """A size the kernel gives in KiB (1,024 bytes), in MB (10^6 bytes)."""
    return kib * 1024 / BYTES_PER_MB


OUTCOMES: tuple[Outcome, ...] = ("done", "failed", "lost", "stopped", "not-started")


@dataclass(frozen=True, slots=True)
class Handover:
    """A job as it was handed to Dask (Snakemake's side, when it was handed over)."""

    key: str  # the Dask task key: one per attempt and rerun
    rule: str  # the rule's name; a group job's is "group <name>"
    jobid: int | str  # Snakemake's job id (a group job's is a uuid)
    attempt: int  # Snakemake's attempt (retries)
    #: "direct" (the command on the worker), "warm" or "cold" (Snakemake's job command, in
    #: a process forked from a parsed workflow or a fresh Snakemake), as the job was built;
    #: a warm job that ran cold after all says so in :attr:`Ended.cold`.
    way: Way
    threads: int
    mem_mb: float | None  # None: the job asked for no memory
    runtime_min: float | None  # Snakemake's ``runtime`` resource, minutes; None: not set
    at: float  # epoch seconds, Snakemake's clock
    wildcards: str = ""  # "sample=A,chunk=3"
    #: 0 for the attempt's first run; n for its n-th run after its worker died under it.
    rerun: int = 0
    group: bool = False
    #: A group job's members' rules (each once, sorted): what a user changes to size it.
    members: tuple[str, ...] = ()


class Ended(NamedTuple):
    """How a task ended, in plain facts (what the run's listener makes of its ``Finished``:
    :func:`...dispatch.usage_listener.ended_from`)."""

    ok: bool
    #: What it used, if it ran and its worker said so.
    usage: Usage | None = None
    #: The failed job's exit code (negative: the signal that killed it); None: no outcome.
    returncode: int | None = None
    #: Its command could not be started at all (why).
    start_error: str | None = None
    #: Why there is no outcome (cancelled, lost with the scheduler, ...).
    problem: str | None = None
    #: The worker that died under it.
    lost_on: str | None = None
    #: The run was stopping it (landing, SIGTERM, Ctrl-C, a broken cluster): why.
    stop: str | None = None
    #: It ran the cold way (a fresh Snakemake), as its worker said.
    cold: bool = False


@dataclass(frozen=True, slots=True)
class WorkerSpan:
    """A Dask worker's time in the farm, and what it offered."""

    name: str
    host: str
    cpus: float
    joined: float  # epoch seconds
    left: float | None = None  # None: still there at the end
    mem_mb: float | None = None
    #: The SLURM job it runs in: the allocation's id, a worker job's, or "" (local).
    slurm_job: str = ""
    #: Its size was not told: ``cpus`` is the most threads its jobs used at once.
    estimated: bool = False


@dataclass(frozen=True, slots=True)
class RunFacts:
    """The run, as a whole, when the report is written."""

    started: float  # epoch seconds: when the farm was ready (or the first hand-over)
    ended: float  # epoch seconds: when the report is written
    mode: str = ""  # local, srun, sbatch or attach
    allocation: str = ""  # the SLURM job the run runs in ("" outside one)
    command: str = ""  # the Snakemake command line
    stop_reason: str = ""  # why the run stopped early ("" if it did not)


class Attempt(NamedTuple):
    """One row of ``jobs.tsv``: a job attempt (or rerun), what it asked, where and how it ran.

    A named tuple, not a frozen dataclass: a report of 100,000 jobs builds 100,000 of
    them, and a tuple is built several times faster."""

    key: str
    rule: str
    jobid: int | str
    attempt: int
    rerun: int
    way: Way
    wildcards: str
    group: bool
    threads: int
    mem_mb: float | None
    runtime_min: float | None
    handed_over: float
    outcome: Outcome
    detail: str  # the exit ("exit 3", "signal 9"), or why it did not run or finish
    host: str = ""
    worker: str = ""
    slurm_job: str = ""
    started: float | None = None  # the worker's clock
    wall: float | None = None
    cpu: float | None = None
    #: The attempt's peak RSS (its largest process's), MB, when the kernel could tell it.
    max_rss_mb: float | None = None
    #: Otherwise, what its peak was at most (MB): the job's first process inherits the worker's
    #: own peak (see :class:`...worker.wire.Usage`), and the job stayed below it.
    rss_at_most_mb: float | None = None
    members: tuple[str, ...] = ()  # a group job's members' rules (Handover.members)

    @property
    def finished(self) -> float | None:
        return None if self.started is None or self.wall is None else self.started + self.wall

    @property
    def wait(self) -> float | None:
        """Seconds from hand-over to start (two clocks: Snakemake's host and the node)."""
        return None if self.started is None else max(0.0, self.started - self.handed_over)

    @property
    def cores(self) -> float | None:
        """CPU seconds over wall seconds: the cores it kept busy on average."""
        if self.cpu is None or not self.wall:
            return None
        return self.cpu / self.wall


#: A worker job's workers are named ``j<job id>-<node>...`` (see
#: :func:`...worker.supervisor.worker_name`).
_WORKER_JOB_NAME = re.compile(r"^j(\d+)-")


def worker_job_of(worker: str) -> str | None:
    """The worker job a worker belongs to, by its name; None for the allocation's own."""
    match = _WORKER_JOB_NAME.match(worker)
    return match.group(1) if match else None
