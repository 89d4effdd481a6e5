"""What the dispatcher hands on for every task that ended (pure): success, the failed job's
outcome, or why there is none (its worker died, it was cancelled, ...)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..worker.wire import Cold, TaskOutcome, Usage


@dataclass(frozen=True, slots=True)
class WorkerRef:
    """A Dask worker by its name and the pid of its process (the pid names its supervisor's
    record)."""

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
    lost_on: WorkerRef | None = None
    #: How long a job that succeeded ran, as its worker measured it.
    seconds: float | None = None
    #: The worker a failed job ran on (its name and process id).
    on: WorkerRef | None = None
    #: What the job used, measured on its worker (success or failure); None if it never
    #: ran, or no word came from its worker (lost, cancelled).
    usage: Usage | None = None
    #: A general-way job that ran the cold way (a fresh Snakemake): why (the event's
    #: ``cold``, :meth:`..worker.wire.Cold.from_wire`); None: it ran direct or warm.
    cold: Cold | None = None
    #: It never started where it was, for lack of time there: its worker would land before
    #: it could finish (it waited there too long), or its worker job landed. It goes to
    #: another worker (``problem`` says why, for the detail log).
    too_late: bool = False


class SubmitFailed(Exception):
    """Dask refused some of a batch (e.g. the client lost its scheduler): ``keys`` were
    not submitted; the rest of the batch was."""

    def __init__(self, keys: list[str], cause: BaseException):
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.keys = keys


def finished_from_event(msg: Mapping[str, Any]) -> Finished | None:
    """The :class:`Finished` a worker's event describes (None if it is not one of ours)."""
    key = msg.get("key")
    if not isinstance(key, str):
        return None
    usage = Usage.from_wire(msg.get("usage"))
    cold = Cold.from_wire(msg.get("cold"))
    if msg.get("ok"):
        seconds = msg.get("seconds")
        seconds = float(seconds) if seconds is not None else None
        return Finished(key, True, seconds=seconds, usage=usage, cold=cold)
    if msg.get("too_late"):  # it never started: it goes elsewhere
        return Finished(key, False, problem=str(msg["too_late"]), too_late=True)
    name, pid = msg.get("worker_name"), msg.get("worker_pid")
    on = WorkerRef(name, pid if isinstance(pid, int) else None) if isinstance(name, str) else None
    outcome = msg.get("outcome")
    if isinstance(outcome, dict):
        found = TaskOutcome(**{**outcome, "cold": cold})  # (the event's, as a Cold)
        return Finished(key, False, outcome=found, on=on, usage=usage, cold=cold)
    problem = str(msg.get("problem") or "it failed on its worker")
    return Finished(key, False, problem=problem, on=on, usage=usage)
