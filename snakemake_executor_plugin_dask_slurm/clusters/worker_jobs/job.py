"""One worker job, as dask-jobqueue's ``Job`` is one: its state, what happened to it, and
its transitions, each a method; the pool (:mod:`.pool`) asks SLURM and the scheduler and
hands each job what they said.

Its :class:`State` follows from what happened to it, so it cannot disagree with it::

    PENDING ──(its workers joined)──> RUNNING ──(its landing point)──> LANDING
       │                                 │                                │
       └──(cancelled, stopped)──> RETIRING <──(retired idle, stopped)─────┘ (ends itself)
                                     │
    any state ──(SLURM no longer runs it)──> ENDED, with its :class:`End`

A job cancelled while pending whose workers join anyway stays RETIRING: what the plugin
did to it stands.
"""

from __future__ import annotations

import contextlib
import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ...slurm.hostlist import expand_hostlist
from ...slurm.run import Queued
from ...slurm.states import GONE, Phase, phase
from . import policy


class Action(enum.Enum):
    """What the plugin did to a worker job (its end is then no surprise)."""

    #: Idle with nothing waiting: its workers left through the scheduler; it ends itself.
    RETIRED = "retired"
    #: Pending and no longer needed.
    CANCELLED = "cancelled"
    #: The run ended.
    STOPPED = "stopped"
    #: Its time limit came near: its workers left with nothing lost; it ends itself.
    LANDED = "landed"


class State(enum.Enum):
    #: Submitted; its workers have not joined yet (queued, or starting).
    PENDING = "pending"
    #: Its workers joined the run.
    RUNNING = "running"
    #: Past its landing point: its workers take no new job and leave once they hold none.
    LANDING = "landing"
    #: Let go by the plugin (retired idle, cancelled while pending, stopped at the run's
    #: end): it ends by itself, or by scancel.
    RETIRING = "retiring"
    #: SLURM no longer runs it.
    ENDED = "ended"


#: The states in which a worker job still counts for the policy (nothing was done to it).
LIVE = (State.PENDING, State.RUNNING)


class End(enum.Enum):
    """Why a worker job ended, as the plugin tells it: what the plugin did to it, or
    nothing (it ended under the run: its time limit, a scancel by someone, a node)."""

    RETIRED = "retired"
    CANCELLED = "cancelled"
    STOPPED = "stopped"
    LANDED = "landed"
    UNDER_THE_RUN = "ended"

    @classmethod
    def of(cls, action: Action | None) -> End:
        return cls.UNDER_THE_RUN if action is None else cls[action.name]


class Seen(enum.Enum):
    """What squeue's answer changed about a worker job."""

    STARTED = "started"
    ENDED = "ended"


def worker_job_of(worker: str) -> str | None:
    """``j1234-n3`` -> ``1234`` (None: not a worker job's worker)."""
    if not worker.startswith("j"):
        return None
    job_id = worker[1:].partition("-")[0]
    return job_id if job_id.isdigit() else None


@dataclass
class WorkerJob:
    """One worker job as the plugin knows it."""

    job_id: str
    cpus: float
    submitted: float
    #: SLURM's word for its state (squeue's), GONE once squeue no longer lists it.
    slurm_state: str = "PENDING"
    nodes: tuple[str, ...] = ()
    started: float | None = None
    joined: float | None = None
    ended: float | None = None
    #: Why it ended (None: still there, or not yet known).
    end: End | None = None
    #: What the plugin did to it.
    action: Action | None = None
    action_at: float | None = None
    idle_since: float | None = None
    workers: set[str] = field(default_factory=set)
    #: How many of its workers the run has announced as joined (a job of nodes of
    #: different sizes starts one srun step per size; they join one after the other).
    announced: int = 0
    #: Its end, from squeue's time left (None: no time limit, or not running yet).
    end_at: float | None = None
    #: The job submitted to replace it before it lands, and the one it replaces.
    successor: str | None = None
    replaces: str | None = None
    #: Its landing: the hard stop done; cancelled just before its end (still there).
    hard_stopped: bool = False
    cancelled_at_end: bool = False

    @property
    def state(self) -> State:
        if self.ended is not None:
            return State.ENDED
        if self.action is Action.LANDED:
            return State.LANDING
        if self.action is not None:
            return State.RETIRING
        return State.RUNNING if self.joined is not None else State.PENDING

    @property
    def ran(self) -> bool:
        """Whether it ran: squeue saw it start, or its workers joined (a job can start and
        end between two looks at squeue)."""
        return self.started is not None or self.joined is not None

    def seen(self, queued: Queued, now: float) -> Seen | None:
        """What squeue said of it at ``now`` (its state, nodes, time left): whether it
        started or ended just now."""
        state = queued.state.split()[0] if queued.state else GONE
        if queued.nodes and queued.nodes not in ("(null)", "None assigned"):
            with contextlib.suppress(ValueError):
                self.nodes = tuple(expand_hostlist(queued.nodes))
        self.slurm_state = state
        now_in = phase(state)
        if now_in is Phase.STARTED and queued.left is not None:
            self.end_at = now + queued.left
        if now_in is Phase.STARTED and self.started is None:
            self.started = now
            return Seen.STARTED
        if now_in is Phase.ENDED:
            self.ended, self.end = now, End.of(self.action)
            return Seen.ENDED
        return None

    def workers_hold(self, held: Mapping[str, int], now: float) -> tuple[bool, bool]:
        """Its workers registered now and how many tasks each holds: whether they are the
        first to join, and whether more joined than were announced."""
        self.workers.update(held)
        first = self.joined is None
        if first:
            self.joined = now
        more = len(self.workers) > self.announced
        if more:
            self.announced = len(self.workers)
        busy = any(held.values())
        self.idle_since = None if busy else (self.idle_since or now)
        return first, more

    def let_go(self, action: Action, now: float) -> None:
        """The plugin retired, cancelled, stopped or landed it."""
        self.action, self.action_at = action, now

    def view(self, landing_at: float | None, alive: set[str]) -> policy.JobView:
        """What the policy sees of it while it is live (``alive``: the live jobs' ids)."""
        return policy.JobView(
            self.job_id,
            policy.RUNNING if self.state is State.RUNNING else policy.PENDING,
            self.cpus,
            self.idle_since,
            self.submitted,
            landing_at,
            replaced=self.successor is not None,
            replacing=self.replaces in alive,
        )

    def end_words(self) -> str:
        """How it ended, for the closing line ("running" while it has not)."""
        if self.end is None:
            return "running"
        if self.end is End.UNDER_THE_RUN:
            return f"ended ({self.slurm_state.lower()})"
        return self.end.value

    def node_seconds(self, now: float) -> float:
        """Node-seconds it ran until it ended (or ``now``)."""
        return ((self.ended or now) - (self.started or self.joined or 0.0)) * max(
            1, len(self.nodes)
        )


def tally(jobs: Sequence[WorkerJob], now: float) -> str:
    """How many worker jobs were submitted and ran, for how long, and how they ended (the
    start of the pool's closing line)."""
    ran = [j for j in jobs if j.ran]
    node_seconds = sum(j.node_seconds(now) for j in ran)
    ends: dict[str, int] = {}
    for j in jobs:
        ends[j.end_words()] = ends.get(j.end_words(), 0) + 1
    how = ", ".join(f"{n} {what}" for what, n in sorted(ends.items()))
    return (
        f"worker jobs: {len(jobs)} submitted, {len(ran)} ran, for "
        f"{math.ceil(node_seconds / 60)} node-minute(s) in all ({how})"
    )
