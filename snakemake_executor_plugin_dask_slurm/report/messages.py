"""What the user is told about a job that did not succeed."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ..worker.proctree import JOB_MARKER, describe_exit
from ..worker.wire import TaskOutcome

#: Why a job lost with its worker is not run again, when it took its worker down twice.
LOST_TWICE = (
    "It was running both times, so the job itself probably takes its worker down, e.g. "
    "by using more memory than the node has (the kernel's out-of-memory killer then "
    "kills the biggest process with SIGKILL). It is not run again: give it more memory "
    "(a bigger allocation, fewer jobs per node) or check it on its own."
)


#: Starts every quoted line of a job's output. A general-way job's output ends with its own
#: Snakemake's report of the same failure ("Error in rule ...", "Shutting down", "Exiting
#: because a job execution failed"): unmarked, it read as this Snakemake's own, the failure
#: seemed reported twice and a run still waiting for another job seemed finished (issue 16).
QUOTE = "  | "


def job_label(job: Any) -> str:
    if job.is_group():
        return f"group job {job.name} ({', '.join(sorted(set(job.rules)))})"
    return f"rule {job.name} (jobid {job.jobid}, attempt {job.attempt})"


#: The indentation of Snakemake's error block ("    message: ..."), which the last line
#: of a failure's message takes too.
BLOCK = "    "


def failure_message(
    job: Any, outcome: TaskOutcome | None, problem: str | None, way: str, log_path: str
) -> str:
    """Rule, what happened (``outcome``, or without one the ``problem``), the end of the
    job's output, and where the full log is."""
    log = os.path.abspath(log_path)  # as the block's own "log:" line is
    label = job_label(job)
    if outcome is None:
        return f"{label} did not finish: {problem}. Log: {log}\n"
    if outcome.start_error:
        return f"{label} could not be started on {outcome.host}: {outcome.start_error}. Log: {log}"
    what = describe_exit(outcome.returncode)
    tail = "\n".join(QUOTE + line for line in (outcome.tail.strip() or "(no output)").splitlines())
    return (
        f"{label} {what} on {outcome.host} after {outcome.finished - outcome.started:.1f} s "
        f"(run the {way} way). Last lines of its output:\n{tail}\n{BLOCK}Full log: {log}\n"
    )


def lost_job_message(
    label: str, worker: str, was_running: bool, how: str | None, verdict: str
) -> str:
    """A job whose worker died: where it was, what became of its processes, and what the
    plugin does about it (``verdict``)."""
    where = f"was running on {worker}" if was_running else f"was waiting, not started, on {worker}"
    ended = f": {how}" if how else ""
    return f"{label} {where} when that worker died{ended}. {verdict}\n"


def lost_worker_line(
    worker: str,
    silent: str | None,
    gone: Any,
    running: int,
    waiting: int,
    failed: int,
    detail_log: str,
) -> str:
    """The one line about a worker lost with jobs: which, why, how its jobs' processes were
    ended, and how many of its jobs run again (were running), moved (were waiting) or
    failed. ``silent``: how a worker that stopped answering was ended (None: it died);
    ``gone``: the recovery's :class:`..dispatch.recovery.Gone`, None if its jobs'
    processes could not be made sure to have ended."""
    if silent is not None:
        why = f"worker {worker} stopped answering (no heartbeat) and was ended ({silent})"
    elif gone is not None and gone.record.get("exit"):
        why = f"worker {worker} {gone.worker_exit}"
    else:
        why = f"worker {worker} is gone"
    ended = f"; {gone.how}" if gone is not None else "; its jobs' processes could not be ended"
    counts = [
        f"{running} running job(s) run again elsewhere" if running else "",
        f"{waiting} waiting job(s) moved to other workers" if waiting else "",
        f"{failed} failed (below)" if failed else "",
    ]
    where = f" (each job: {detail_log})" if detail_log else ""
    return f"{why}{ended}: {', '.join(c for c in counts if c)}{where}"


def stopped_line(why: str, keys: Sequence[str], running: set[str] | None) -> str:
    """The one closing message of a run stopped at once (SIGTERM): how many of its jobs
    were running (stopped, their outputs removed by Snakemake) and how many waiting (never
    started); ``running`` None when the workers could not be asked."""
    if not keys:
        return f"{why}: the run stops; no job was running."
    if running is None:
        counts = f"its {len(keys)} job(s) were stopped with their workers"
    else:
        started = len(running)
        counts = (
            f"{started} running job(s) were stopped (Snakemake removes what they wrote), "
            f"{len(keys) - started} waiting job(s) never started"
        )
    return (
        f"{why}: the run stops; {counts}. Run the same command again to continue: "
        "Snakemake redoes only what is missing."
    )


def unconfirmed_verdict(worker: str, key: str) -> str:
    return (
        "The plugin could not make sure that the job's processes ended (no word from the "
        "worker's supervisor, and they could not be ended another way), so it is not run "
        f"again. Before you run the workflow again, look on {worker} for processes whose "
        f"environment holds {JOB_MARKER}={key} and end them."
    )
