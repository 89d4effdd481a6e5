"""What SLURM says of a job's state, in a user's words (pure)."""

from __future__ import annotations

import enum
import re

#: The state :func:`allocation_ended` is given for a job SLURM no longer knows (purged).
GONE = "GONE"


class Phase(enum.Enum):
    """Where a SLURM job is in its life, as the plugin acts on it."""

    #: Queued, or being set up: its workers are still to come.
    PENDING = "pending"
    #: Started and not over (running, suspended, completing, being signalled).
    STARTED = "started"
    #: Over (completed, failed, cancelled, timed out, ...; or no longer listed).
    ENDED = "ended"


#: SLURM's job states (squeue's %T) by phase; any other state is an end.
PENDING_STATES = frozenset(
    {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING"}
)
STARTED_STATES = frozenset({"RUNNING", "SUSPENDED", "STOPPED", "COMPLETING", "SIGNALING"})


def phase(state: str) -> Phase:
    """The phase of a job in ``state`` (squeue's word; ``GONE``: no longer listed)."""
    if state in PENDING_STATES:
        return Phase.PENDING
    if state in STARTED_STATES:
        return Phase.STARTED
    return Phase.ENDED


#: What a job state other than RUNNING means for the workers, in a user's words.
_ENDED_STATES = {
    "CANCELLED": "it was cancelled (scancel, or by an administrator)",
    "TIMEOUT": "it reached its time limit; ask for more time (--time) and run again: "
    "Snakemake redoes only what is missing",
    "NODE_FAIL": "one of its nodes failed; run again (Snakemake redoes only what is missing)",
    "PREEMPTED": "a job of higher priority preempted it",
    "DEADLINE": "it reached its deadline",
    "OUT_OF_MEMORY": "it ran out of memory",
    "BOOT_FAIL": "a node failed to boot",
    "FAILED": "SLURM ended it as failed",
    "COMPLETED": "it ended",
    "SUSPENDED": "it was suspended",
    GONE: "SLURM no longer lists it, so it ended a while ago",
}


#: While a job is COMPLETING (its nodes still cleaning up, which can last KillWait and
#: the epilog), SLURM shows that instead of why it ended; the reason still tells.
_COMPLETING_REASONS = {
    "TimeLimit": "TIMEOUT",
    "NodeDown": "NODE_FAIL",
    "OutOfMemory": "OUT_OF_MEMORY",
    "DeadLine": "DEADLINE",
}


def parse_job_state(text: str) -> tuple[str, str] | None:
    """``JobState`` and ``Reason`` from what ``scontrol show job -o`` printed, or None."""
    fields = dict(re.findall(r"(?:^|\s)(JobState|Reason)=(\S*)", text))
    state = fields.get("JobState")
    return (state, fields.get("Reason", "None")) if state else None


def allocation_ended(job_id: str, state: tuple[str, str]) -> str | None:
    """A sentence saying the allocation is no longer running and why; None while it runs.

    ``state`` is :func:`parse_job_state`'s answer, or ``(GONE, "None")`` for a job SLURM
    no longer knows.
    """
    name, reason = state
    if name == "RUNNING":
        return None
    meaning = _COMPLETING_REASONS.get(reason) if name == "COMPLETING" else name
    if meaning is None:
        # COMPLETING without a telling reason. Inside the allocation the plugin still
        # runs, so its end was not the batch script's or salloc's command ending: a
        # cancel is what leaves no reason.
        why = (
            "most likely it was cancelled (scancel, or by an administrator), as SLURM "
            f"gives no other reason; 'scontrol show job {job_id}' says more once its "
            "nodes are cleaned up"
        )
    else:
        why = _ENDED_STATES.get(meaning, "SLURM ended it")
    detail = f", reason {reason}" if reason not in ("None", "") else ""
    return f"SLURM allocation {job_id} has ended (state {name}{detail}): {why}"
