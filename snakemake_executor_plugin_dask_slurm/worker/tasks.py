"""The data that crosses between Snakemake's process and the workers (pure).

A :class:`TaskSpec` goes to a worker; a :class:`TaskOutcome` comes back inside
:class:`JobFailed` when a job did not succeed; :class:`Finished` is what the dispatcher
hands the executor for every task that ended.
"""

from __future__ import annotations

from dataclasses import dataclass

#: ``TaskSpec.tmpdir`` value meaning "the worker's own temporary directory", i.e.
#: Snakemake's default ``tmpdir=system_tmpdir`` evaluated where the job runs.
SYSTEM_TMPDIR = "system_tmpdir"


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """One job, as the worker runs it."""

    key: str
    argv: tuple[str, ...]
    cwd: str
    env: tuple[tuple[str, str], ...]
    log_path: str
    #: Where TMPDIR and friends point, as Snakemake's ``shell()`` does with the job's
    #: ``resources.tmpdir``: a path, SYSTEM_TMPDIR, or None to leave them alone.
    tmpdir: str | None
    #: Snakemake's priority of the job (``priority:``, ``--prioritize``): Dask runs the
    #: higher first among the tasks a worker holds.
    priority: float = 0


@dataclass(frozen=True, slots=True)
class TaskOutcome:
    """How a job ended."""

    returncode: int  # negative: killed by that signal
    host: str
    started: float
    finished: float
    tail: str  # the end of the job's log when it failed, else ""
    start_error: str | None = None  # the command could not be started at all


class JobFailed(Exception):
    """Raised on the worker when a job did not succeed.

    The outcome then travels with the task's error, which Dask sends to the client with
    the task's state anyway; a successful job's result is never fetched at all. So the
    thousands of jobs that succeed cost no extra round trip to the worker.
    """

    def __init__(self, outcome: TaskOutcome):
        super().__init__(outcome)
        self.outcome = outcome

    def __str__(self) -> str:
        return f"job exited with code {self.outcome.returncode} on {self.outcome.host}"


@dataclass(frozen=True, slots=True)
class LostWorker:
    """A worker that died while it held tasks (Dask's ``KilledWorker``)."""

    name: str
    pid: int | None


@dataclass(frozen=True, slots=True)
class Finished:
    """A task that is no longer running: success, or the failed job's outcome, or why
    there is no outcome (worker lost, cancelled, ...)."""

    key: str
    ok: bool
    outcome: TaskOutcome | None = None
    problem: str | None = None
    #: Set when the task's worker died: its processes may still run until its
    #: supervisor ends them, so the job is neither failed nor rerun before that.
    lost_on: LostWorker | None = None
    #: How long a job that succeeded ran, as its worker measured it.
    seconds: float | None = None
    #: The worker a failed job ran on (its name and process id).
    on: LostWorker | None = None
