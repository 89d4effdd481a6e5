"""The zygote's children in one table, with one reaper (gunicorn's ``Arbiter``: one
``WORKERS = {pid: Worker}`` and one ``reap_workers`` loop of ``waitpid(-1, WNOHANG)``).

The zygote forks two kinds of child: a primed server per job command (:class:`ServerRecord`,
:mod:`.primed`), and the process of a warm job's Python script (:class:`Script`,
:mod:`.script_run`). :meth:`Children.reap` waits for every child that ended, whichever
kind: a script's status and figures are handed on (to its job's process); a server's are
kept on it, since its socket may still hold its last messages, which are read before its
end is handled (:meth:`Children.server_ended`).
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..worker.warm_protocol import Inbox, Outbox
from ..worker.wire import Cold

if TYPE_CHECKING:
    from resource import struct_rusage

#: How long :meth:`Children.server_ended` waits for a server whose socket closed to end
#: (its exit follows the close): this many tries, this far apart.
SERVER_END_TRIES = 200
SERVER_END_PAUSE = 0.005


@dataclass(eq=False)
class ServerRecord:
    """The zygote's record of a primed server (:class:`.primed.Server`, its process):
    forked for one job command (``key``), it forks that command's jobs."""

    pid: int
    sock: socket.socket
    key: str
    inbox: Inbox = field(default_factory=Inbox)
    retired: bool = False
    #: Task keys sent to it that it has not started yet, and those it runs.
    sent: set[str] = field(default_factory=set)
    running: set[str] = field(default_factory=set)
    #: Why it cannot parse its command warm (its ``unsupported`` message).
    refused: Cold | None = None
    #: It said something since it primed: from then on it must answer pings.
    primed: bool = False
    #: When the ping it has not answered yet was sent (None: none outstanding).
    asked: float | None = None
    #: Why it was killed, if it stopped answering.
    hung: str | None = None
    #: How it ended, in words, once reaped (its socket may not have been read to its end).
    ended: str | None = None


@dataclass(eq=False)
class Script:
    """The process of a warm job's Python script (:mod:`.script_run`)."""

    pid: int
    #: Its own task key, its job's (its marker), and where its messages go.
    key: str
    job: str
    origin: Outbox
    #: Once reaped: its wait status (None: it was reaped elsewhere) and what it used.
    status: int | None = None
    rusage: struct_rusage | None = None


class Children:
    """Every child of the zygote by pid, and the one reaper."""

    def __init__(self) -> None:
        self.table: dict[int, ServerRecord | Script] = {}
        self._ended: list[Script] = []

    def add(self, child: ServerRecord | Script) -> None:
        self.table[child.pid] = child

    def remove(self, child: ServerRecord | Script) -> None:
        if self.table.get(child.pid) is child:
            del self.table[child.pid]

    def servers(self) -> list[ServerRecord]:
        return [c for c in self.table.values() if isinstance(c, ServerRecord)]

    def server(self, pid: int | None) -> ServerRecord | None:
        found = self.table.get(pid) if pid is not None else None
        return found if isinstance(found, ServerRecord) else None

    def runs(self, task: str) -> bool:
        """Whether a server runs the task ``task``."""
        return any(task in server.running for server in self.servers())

    def reap(self) -> list[Script]:
        """Wait for every child that ended (without blocking); the scripts that did, out
        of the table. A server that ended stays until its socket's end is read."""
        self._collect()
        ended, self._ended = self._ended, []
        return ended

    def server_ended(self, server: ServerRecord) -> str:
        """How a server whose socket closed ended, in words, waiting for it briefly."""
        for _ in range(SERVER_END_TRIES):
            self._collect()
            if server.ended is not None:
                return server.ended
            time.sleep(SERVER_END_PAUSE)
        return "closed its connection"

    def _collect(self) -> None:
        while self.table:
            try:
                pid, status, rusage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:  # those still listed were waited for elsewhere
                for child in list(self.table.values()):
                    self._end(child, None, None)
                return
            if pid == 0:
                return
            found = self.table.get(pid)
            if found is not None:
                self._end(found, status, rusage)

    def _end(
        self, child: ServerRecord | Script, status: int | None, rusage: struct_rusage | None
    ) -> None:
        if isinstance(child, ServerRecord):
            if child.ended is None:
                child.ended = exit_words(status)
            return
        if self.table.get(child.pid) is child:
            del self.table[child.pid]
            child.status, child.rusage = status, rusage
            self._ended.append(child)


def exit_words(status: int | None) -> str:
    """A child's wait status in words (None: it was waited for elsewhere)."""
    if status is None:
        return "ended"
    code = os.waitstatus_to_exitcode(status)
    return f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
