"""What to do with a task that ended (pure): every branch of it, in one function.

A task's end reaches the plugin as a :class:`.outcomes.Finished`. Whether the job it ran
is told to Snakemake as succeeded or failed, waits until its processes are known gone, or
is first checked against SLURM, depends on the outcome and on the run's state — and the
end-to-end tests found the races that make the order matter: a job that failed because
SLURM's SIGTERM reached it before its worker job was seen to end is lost with that worker
job, not failed; a job killed by a signal the plugin did not send may have been killed by
the allocation's end, which then says so once for every job.
"""

from __future__ import annotations

import enum
import signal
from dataclasses import dataclass

from .outcomes import Finished


class Route(enum.Enum):
    #: Not registered any more (cancelled and forgotten): nothing to do.
    FORGOTTEN = "forgotten"
    #: Succeeded: tell Snakemake.
    SUCCEEDED = "succeeded"
    #: The cluster broke: the run's one message covers it once its processes are gone.
    COVERED = "covered by the run's failure"
    #: Its worker died under it: it waits (registered) until its processes are known gone,
    #: then runs again elsewhere or fails (:func:`.recovery.decide`).
    LOST = "lost with its worker"
    #: It never started where it was, for lack of time there (its worker would land first,
    #: or its worker job landed): it is handed over again, to a worker with time for it,
    #: or refused if none can ever have it. Not a failure: nothing ran.
    MOVE = "hand over again elsewhere"
    #: Stopped by the plugin at its worker job's landing (it could not finish before that
    #: job's time limit): its outputs are removed and it runs again elsewhere. Not a
    #: failure, and not a worker lost under it.
    RERUN = "run again elsewhere"
    #: It failed on a worker job's worker while the run goes on: if that worker job is
    #: ending (SLURM says so), it was killed with it and is lost; else it failed.
    ASK_WORKER_JOB = "ask whether its worker job ended"
    #: No outcome (cancelled, or lost with the scheduler): is the cluster broken? Then the
    #: run's failure covers it; else it failed.
    CHECK_CLUSTER = "check the cluster, then fail"
    #: Killed by a signal the plugin did not send (or its shell said so: 143): did SLURM end
    #: the allocation? Then the run's failure covers it; else it failed.
    ASK_ALLOCATION = "ask whether the allocation ended"
    #: It failed: tell Snakemake, with its message.
    FAILED = "failed"


@dataclass(frozen=True)
class RunState:
    """What the routing needs to know of the run when a task ended."""

    #: The job is still registered (not cancelled and forgotten).
    registered: bool = True
    #: The cluster broke: the run is failing all its jobs at once.
    fatal: bool = False
    #: The run refuses new jobs (SIGTERM, landing, cancel, a broken cluster).
    stopping: bool = False
    #: The job ran on a worker of a worker job.
    on_worker_job: bool = False
    #: The plugin stopped it at its worker job's landing.
    stopped_at_limit: bool = False


def route(finished: Finished, state: RunState) -> Route:
    """What to do with ``finished``, given the run's ``state``."""
    if not state.registered:
        return Route.FORGOTTEN
    if finished.ok:
        return Route.SUCCEEDED
    if state.fatal:
        return Route.COVERED
    if finished.too_late and not state.stopping:
        return Route.MOVE
    if finished.lost_on is not None:
        return Route.LOST
    if state.stopped_at_limit and not state.stopping:
        return Route.RERUN
    if state.on_worker_job and not state.stopping:
        return Route.ASK_WORKER_JOB
    if finished.outcome is None:
        return Route.CHECK_CLUSTER
    if killed_by_a_signal(finished.outcome.returncode) and not state.stopping:
        return Route.ASK_ALLOCATION
    return Route.FAILED


#: The signals SLURM sends the processes of an allocation it ends (and a node's end).
_ENDING_SIGNALS = (signal.SIGTERM, signal.SIGKILL, signal.SIGHUP)
#: A shell whose command was killed by one of them exits with 128 + its number.
_SHELL_CODES = frozenset(128 + int(s) for s in _ENDING_SIGNALS)


def killed_by_a_signal(returncode: int) -> bool:
    """Whether a job's exit says a signal of the kind SLURM sends ended it: killed by a
    signal (negative), or its shell reporting that of its command (143 for SIGTERM)."""
    return returncode < 0 or returncode in _SHELL_CODES
