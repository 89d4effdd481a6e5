"""What crosses the wire between Snakemake's process and the workers (pure).

A :class:`TaskSpec` goes to a worker; a :class:`TaskOutcome` says how the job ended, and
comes back in the task's outcome event (:func:`.task.run_and_report`) when it did not
succeed. What the dispatcher makes of the events is :mod:`..dispatch.outcomes`'.
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
    """Raised on the worker when a job did not succeed; :func:`.task.run_and_report`
    turns it into the task's outcome event."""

    def __init__(self, outcome: TaskOutcome):
        super().__init__(outcome)
        self.outcome = outcome

    def __str__(self) -> str:
        return f"job exited with code {self.outcome.returncode} on {self.outcome.host}"
