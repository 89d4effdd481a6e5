"""What the zygote knows of each task it handles and of each job command: its bookkeeping,
apart from its sockets and forks, so that it can be tested alone.

A :class:`Task` lives from its request (the worker's, a group member's or a warm script's)
until its end is relayed (``exited``, ``cold`` or ``lost``). A job's request goes to the
primed server of its :class:`Command`: its arguments without the per-job ones, its
environment and working directory (:func:`command_key`), unless it must go the cold way:
:func:`refusal`, the one check of both a job's request and a prime.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..worker.proctree import JOB_MARKER
from ..worker.warm_protocol import Op, Outbox, Prime, Run
from ..worker.wire import Cold, Why
from . import marker, snakemake_side
from .member import close_fds

#: A command whose workflow sources changed more often than this goes the cold way.
STALE_LIMIT = 3

#: What a process used, as ``wait4`` of its parent says: (CPU seconds, peak RSS, the RSS
#: floor it inherited; see worker.wire.Usage).
Used = tuple[float, int, int]


@dataclass(eq=False)
class Task:
    """One task, from its request until its end is relayed."""

    #: Where its messages go: a group member's or a script's connection (None: the worker).
    origin: Outbox | None = None
    #: The file descriptors its request came with (a member's or script's stdin, stdout
    #: and stderr), until it started or went cold.
    fds: list[int] = field(default_factory=list)
    #: Its request, until a server started it (a stale server's task goes to a new one).
    request: Run | None = None
    #: A group's warm member: its group job's task key.
    group: str | None = None
    #: What its group's warm members and its scripts used so far, added to its own
    #: figures when it ends (cold, they would be its waited-for descendants, counted by
    #: its ``wait4``).
    used: Used | None = None


class Tasks:
    """The tasks by key."""

    def __init__(self) -> None:
        self._by_key: dict[str, Task] = {}

    def __iter__(self) -> Iterator[tuple[str, Task]]:
        return iter(list(self._by_key.items()))

    def get(self, key: str) -> Task | None:
        return self._by_key.get(key)

    def open(self, key: str) -> Task:
        """The task ``key``, a new record if it has none."""
        return self._by_key.setdefault(key, Task())

    def end(self, key: str) -> None:
        """Its end was relayed (or it was never to run here): forget it."""
        self._by_key.pop(key, None)

    def fds(self, key: str) -> list[int]:
        """The file descriptors the task ``key`` came with (to pass on)."""
        task = self._by_key.get(key)
        return task.fds if task is not None else []

    def origin(self, key: str) -> Outbox | None:
        task = self._by_key.get(key)
        return task.origin if task is not None else None

    def settle(self, key: str) -> None:
        """It started or will not: the file descriptors it came with are not needed."""
        task = self._by_key.get(key)
        if task is not None:
            fds, task.fds = task.fds, []
            close_fds(fds)

    def take_request(self, key: str) -> Run | None:
        task = self._by_key.get(key)
        if task is None:
            return None
        request, task.request = task.request, None
        return request

    def add_used(self, key: str, used: Used) -> None:
        """A process of the task ``key`` that the task did not wait for (a warm member or
        script) ended: what it used goes to the task's figures."""
        task = self.open(key)
        task.used = together(task.used, used)

    def add_members(self, key: str, usage: Any) -> Any:
        """The figures to relay with the end of the task ``key``: a member's own (kept for
        its group job too); a group job's with what its members used added."""
        task = self._by_key.get(key)
        if task is None:
            return usage
        group, task.group = task.group, None
        if group is not None:
            if _is_usage(usage):
                self.add_used(group, usage)
            return usage
        used, task.used = task.used, None
        return together(used, usage) if used is not None and _is_usage(usage) else usage


@dataclass
class Command:
    """One job command (the key of one parse)."""

    #: The primed server that takes its new jobs (its pid), if any.
    server: int | None = None
    #: Why its jobs go the cold way (its server said so, or its sources changed too often).
    refused: Cold | None = None
    #: How often its workflow's sources changed during the run.
    stale: int = 0

    def changed(self, path: str) -> None:
        """Its server found ``path`` changed: after :data:`STALE_LIMIT` times, cold."""
        self.stale += 1
        if self.stale > STALE_LIMIT:
            self.refused = Cold(Why.SOURCES_CHANGED, f"{self.stale} times; last: {path}")


#: The key of the request a server is forked with to prime it (no job's), and what the
#: zygote's log says then.
PRIME_KEY = "dask-slurm-prime"
PRIMING = "parsing the workflow for a job command before its first job"


def priming(request: Prime) -> Run:
    """The request a primed server is forked with for ``request``: it parses the job
    command's workflow and runs nothing (:attr:`~..worker.warm_protocol.Run.prime`)."""
    return Run(
        op=Op.RUN, key=PRIME_KEY, argv=request["argv"], env=request["env"],
        cwd=request["cwd"], prime=True,
    )  # fmt: skip


def command_key(request: Run, nargs: dict[str, Any]) -> str:
    """The key of a job request's parse: its arguments without the per-job ones
    (:func:`.snakemake_side.parse_key`), its environment and working directory."""
    argv = snakemake_side.parse_key(list(request["argv"]), nargs)
    env = sorted((str(k), str(v)) for k, v in request["env"])
    return json.dumps([argv, env, str(request["cwd"])])


def refusal(request: Run, command: Command | None, cwd: str) -> Cold | None:
    """Why a job request (or a prime's, :func:`priming`) of the job command ``command``
    (None: none seen yet) cannot go to a primed server of a zygote started in ``cwd``, or
    None. The zygote asks this for every job and every prime, and nothing else."""
    if os.path.realpath(str(request["cwd"])) != os.path.realpath(cwd):
        return Cold(Why.OTHER_CWD, f"{request['cwd']}; the warm process runs in {cwd}")
    python = request.get("python")
    if python not in (None, sys.executable):
        return Cold(Why.OTHER_PYTHON, f"{python}; the warm process runs {sys.executable}")
    if not marker.fits(str(request.get("marker") or request["key"])):
        return Cold(Why.KEY_TOO_LONG, f"{JOB_MARKER} of a forked process")
    if any(str(k) == JOB_MARKER for k, _ in request["env"]):
        return Cold(Why.ENV_SETS_MARKER, JOB_MARKER)
    return command.refused if command is not None else None


def _is_usage(usage: Any) -> bool:
    return isinstance(usage, list | tuple) and len(usage) == 3


def together(a: Any, b: Any) -> Used:
    """Two processes' ``(cpu seconds, peak RSS, RSS floor)`` as ``wait4`` of a parent
    that waited for both would give them: CPU added, the larger peak (with its floor)."""
    if a is None:
        return (float(b[0]), int(b[1]), int(b[2]))
    cpu = float(a[0]) + float(b[0])
    peak = a if int(a[1]) >= int(b[1]) else b
    return (cpu, int(peak[1]), int(peak[2]))
