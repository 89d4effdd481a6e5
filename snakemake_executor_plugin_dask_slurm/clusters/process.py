"""Processes the plugin owns: one small contract for the scheduler, workers and srun steps.

Every managed process is started from an argument list (never a shell), in its own
session (so a Ctrl-C at the terminal reaches Snakemake, which then stops them in order,
instead of killing them all at once), with stdout and stderr merged into its own log file.
``close()`` asks the whole process group to stop, waits a bounded time, then kills it.
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import shlex
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import DaskSlurmError
from ..worker.logtail import read_tail
from ..worker.proctree import describe_exit, send, session_members, signal_group
from ..worker.waiting import Deadline, wait_until

logger = logging.getLogger(__name__)

#: Seconds to wait for a closed session's last processes to be gone (PID 1 reaps late).
SESSION_GONE_TIMEOUT = 2.0


class Status(enum.Enum):
    created = "created"
    running = "running"
    exited = "exited"
    closed = "closed"


def log_tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a Dask process's log, tracebacks folded to their
    exception lines; "" if unreadable."""
    return read_tail(path, lines, fold=True)


def kill_session(sid: int) -> None:
    """SIGKILL what is left of a session we created: e.g. the jobs of a worker that was
    itself killed outright, which live on in their own process groups."""
    send(session_members(sid), signal.SIGKILL)


@dataclass
class ManagedProcess:
    """A process the plugin started and must stop."""

    name: str
    argv: Sequence[str]
    log_path: Path
    env: Mapping[str, str] | None = None
    cwd: str | None = None
    #: Started with a pipe as its stdin, for :meth:`hand_over` (else /dev/null).
    stdin_pipe: bool = False
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _closed: bool = field(default=False, init=False, repr=False)

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        logger.debug("starting %s: %s", self.name, shlex.join(self.argv))
        with open(self.log_path, "wb") as log:  # this run's lines only
            try:
                self.proc = subprocess.Popen(
                    list(self.argv),
                    stdin=subprocess.PIPE if self.stdin_pipe else subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=dict(self.env) if self.env is not None else None,
                    cwd=self.cwd,
                    start_new_session=True,
                )
            except OSError as e:
                raise DaskSlurmError(
                    f"Could not start the {self.name}: {e}. Command: {shlex.join(self.argv)}. "
                    "Check that the program exists in this environment and is executable."
                ) from e

    def hand_over(self, data: bytes) -> bool:
        """Write ``data`` to the process's stdin (a ``stdin_pipe`` process) and close it;
        False if the process is gone (its end of the pipe closed)."""
        if self.proc is None or self.proc.stdin is None or self.proc.stdin.closed:
            return False
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.close()
        except (BrokenPipeError, ValueError):
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
            return False
        return True

    @property
    def status(self) -> Status:
        if self._closed:
            return Status.closed
        if self.proc is None:
            return Status.created
        return Status.running if self.proc.poll() is None else Status.exited

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def tail(self, lines: int = 20) -> str:
        return log_tail(self.log_path, lines)

    def exit_description(self) -> str:
        code = self.returncode
        return "is still running" if code is None else describe_exit(code)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the process and its group: SIGTERM, wait up to ``timeout``, SIGKILL."""
        if self.proc is None or self._closed:
            self._closed = True
            return
        pgid = self.proc.pid  # a session leader's pid is its group id
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        self.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            logger.warning("%s did not stop within %.0f s; killing it", self.name, timeout)
        self._signal(signal.SIGKILL)  # whatever is left of the group
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5.0)
        kill_session(pgid)  # a session leader's pid is also its session id
        # session_members skips zombies, which PID 1 may reap only seconds later
        wait_until(lambda: not session_members(pgid), SESSION_GONE_TIMEOUT, interval=0.02)
        self._closed = True

    def terminate(self) -> None:
        """Ask the process group to stop (SIGTERM), without waiting."""
        if self.proc is not None and not self._closed:
            self._signal(signal.SIGTERM)

    def _signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        signal_group(self.proc.pid, sig)  # a session leader's pid is its group id


def read_scheduler_file(path: Path) -> str | None:
    """The address in a scheduler file, or None while it is absent or half-written."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    address = data.get("address") if isinstance(data, dict) else None
    return address if isinstance(address, str) and address else None


def wait_for_scheduler_file(
    path: Path, scheduler: ManagedProcess, timeout: float, poll: float = 0.05
) -> str:
    """Wait until the scheduler has written a usable file; return its address.

    The scheduler is checked on every pass, so one that dies (a port in use, a broken
    environment) is reported at once with its log rather than after the timeout.
    """
    deadline = Deadline(timeout)
    while True:
        address = read_scheduler_file(path)
        if address:
            return address
        if scheduler.status is not Status.running:
            raise DaskSlurmError(
                f"The Dask scheduler {scheduler.exit_description()} before it was ready. "
                f"Its log ({scheduler.log_path}) ends with:\n{scheduler.tail()}\n"
                "Fix what the log names (e.g. a port in use, a missing package) and run "
                "again."
            )
        if deadline.expired:
            raise DaskSlurmError(
                f"The Dask scheduler did not write {path} within {timeout:.0f} s. "
                f"Its log ({scheduler.log_path}) ends with:\n{scheduler.tail()}\n"
                "If the machine is busy, raise --dask-slurm-startup-timeout."
            )
        time.sleep(poll)
