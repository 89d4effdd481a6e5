"""The worker's side of the warm path: whether this worker has a warm process (standard
library only).

One warm process (``warm.zygote``) runs beside each worker, as the worker's child: started
at the first job that can go the warm way, with the interpreter and working directory of
that job's command, and this worker's environment (:func:`start_zygote`); the worker talks
to it through a :class:`.warm_link.ZygoteLink`. The Dask worker has threads and an event
loop, the warm process has neither, so only it forks.

Whether one is wanted is a pure policy over :class:`Restarts` (SpecCluster's shape: what
should exist, then one place that makes it so): a warm process that dies is started again
at the next job, up to :data:`RESTART_LIMIT` times; one that cannot start (Snakemake's
internals changed, no ``/proc``) is not tried again: this worker's jobs then go the cold
way, each with that :class:`.wire.Cold`.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import threading
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from .proctree import JOB_MARKER
from .warm_link import WarmProc, ZygoteLink
from .warm_protocol import SLOT_VARIABLE, Op, Prime, slot_value
from .wire import Cold, TaskSpec, Why

ZYGOTE_MODULE = "snakemake_executor_plugin_dask_slurm.warm.zygote"
#: A worker whose warm process died this often runs the rest of its jobs the cold way.
RESTART_LIMIT = 3
#: In a worker's environment: a JSON file naming a job command for its warm process to
#: parse at the worker's start (:meth:`WarmHost.prime`, written by the run's start).
PRIME_VARIABLE = "DASK_SLURM_WARM_PRIME"


@dataclass(frozen=True, slots=True)
class Restarts:
    """The restart policy's state: how often this worker's warm process died, and why
    every later job goes the cold way (None: a warm process may still be started)."""

    deaths: int = 0
    disabled: Cold | None = None


def after_end(state: Restarts, refused: Cold | None, how: str) -> Restarts:
    """The warm process ended: it could not start (``refused``: never again, for that
    reason), or it died (``how``, in words): after :data:`RESTART_LIMIT` deaths, never again."""
    if state.disabled is not None:
        return state
    if refused is not None:
        return Restarts(state.deaths, refused)
    deaths = state.deaths + 1
    if deaths > RESTART_LIMIT:
        return Restarts(deaths, Cold(Why.DIED_TOO_OFTEN, f"{deaths} times; last: {how}"))
    return Restarts(deaths)


class Want(StrEnum):
    START = "start"  # start a warm process for this job
    USE = "use"  # the running one takes it


def wanted(state: Restarts, running: str | None, python: str) -> Want | Cold:
    """What a job of interpreter ``python`` needs, the warm process of interpreter
    ``running`` being there (None: none is): to start one, to use it, or the cold way."""
    if state.disabled is not None:
        return state.disabled
    if running is None:
        return Want.START
    if running != python:
        return Cold(Why.OTHER_PYTHON, f"{python}; the warm process runs {running}")
    return Want.USE


def warm_log(log_dir: str) -> str:
    """This worker's warm process's log in ``log_dir``."""
    return os.path.join(log_dir, f"warm-{socket.gethostname()}-{os.getpid()}.log")


class _Popen:
    """The warm process, as its :class:`.warm_link.ZygoteLink` sees it."""

    def __init__(self, popen: subprocess.Popen[bytes]):
        self.popen = popen
        self.pid = popen.pid

    def ended(self, timeout: float) -> int | None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=timeout)
        return self.popen.poll()


def start_zygote(python: str, cwd: str, log_path: str) -> ZygoteLink:
    """Start a warm process of interpreter ``python`` in ``cwd``, logging to ``log_path``,
    with this worker's environment; the link to it. Raises OSError if it cannot start."""
    mine, theirs = socket.socketpair()
    env = dict(os.environ)
    env.pop(JOB_MARKER, None)
    env[SLOT_VARIABLE] = slot_value()
    try:
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        with open(log_path, "ab") as log:
            popen = subprocess.Popen(
                # --cwd only names it: `ps` (and the tests' leftover checks) tell whose it is
                [python, "-m", ZYGOTE_MODULE, "--fd", str(theirs.fileno()), "--cwd", cwd],
                pass_fds=[theirs.fileno()],
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                process_group=0,  # the worker's kills of a job's group never reach it
            )
    except OSError:
        mine.close()
        raise
    finally:
        theirs.close()
    return ZygoteLink(_Popen(popen), mine, python, cwd, log_path)


class WarmHost:
    """This worker's warm process: started at the first warm job, again after it died."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._link: ZygoteLink | None = None
        self._state = Restarts()

    def start(self, spec: TaskSpec) -> WarmProc | Cold:
        """Start ``spec``'s job on the warm path: its process, or why it goes the cold way.
        Blocks while the warm process starts or parses the workflow (no time limit: a
        parse that hangs would hang the cold way's job too; the job stays killable)."""
        warm = spec.warm
        assert warm is not None
        with self._lock:
            link = self._ensure(warm.python, spec.cwd, warm.log_dir)
            if isinstance(link, Cold):
                return link
            pending = link.request(spec)
        pending.event.wait()
        assert pending.result is not None
        return pending.result

    def _ensure(self, python: str, cwd: str, log_dir: str) -> ZygoteLink | Cold:
        """(Under the lock.) Make it as :func:`wanted` says: the warm process that takes
        a job of ``python``, started here if need be; or why the job goes cold."""
        link = self._link
        if link is not None and not link.alive:
            self._state = after_end(self._state, link.refused, link.how or "")
            link = self._link = None
        want = wanted(self._state, link.python if link is not None else None, python)
        if isinstance(want, Cold):
            return want
        if link is None:
            try:
                link = self._link = start_zygote(python, cwd, warm_log(log_dir))
            except OSError as e:
                self._state = after_end(self._state, Cold(Why.CANNOT_START, str(e)), "")
                assert self._state.disabled is not None
                return self._state.disabled
        return link

    def prime(self, request: Mapping[str, Any]) -> bool:
        """Start the warm process now, and have it parse ``request``'s job command (its
        ``python``, ``argv``, ``env``, ``cwd``, ``log_dir``: what a warm job's spec holds)
        before the first warm job arrives; nothing waits for it. False if it did not (a
        warm process there already, or none can start: the first warm job then says why)."""
        with self._lock:
            if self._link is not None or self._state.disabled is not None:
                return False
            log = warm_log(str(request["log_dir"]))
            try:
                link = self._link = start_zygote(str(request["python"]), str(request["cwd"]), log)
            except OSError:
                return False
        msg = Prime(
            op=Op.PRIME,
            argv=[str(a) for a in request["argv"]],
            env=[(str(k), str(v)) for k, v in request["env"]],
            cwd=str(request["cwd"]),
        )
        with contextlib.suppress(OSError):
            link.outbox.send(msg)
        return True

    def pids(self) -> set[int]:
        """The warm process: a child of this worker that is no job's."""
        link = self._link
        return {link.proc.pid} if link is not None else set()

    def close(self) -> None:
        link = self._link
        if link is not None:
            link.close()


#: The one warm host of this worker process.
HOST = WarmHost()


def prime_from_env(env: MutableMapping[str, str] = os.environ) -> bool:
    """Take :data:`PRIME_VARIABLE` out of this worker's environment (it is the worker's,
    not its jobs') and, when it names a job command, start the warm process now and have
    it parse that command (:func:`prime_file`). False when nothing was started."""
    path = env.pop(PRIME_VARIABLE, None)
    return prime_file(path) if path else False


def prime_file(path: str) -> bool:
    """Start this worker's warm process and have it parse the job command in the JSON file
    ``path`` (:meth:`WarmHost.prime`; the run wrote it at its start). False when nothing
    was started: an unreadable file (the first warm job then starts the warm process), a
    warm process there already."""
    try:
        request = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return False
    return HOST.prime(request)
