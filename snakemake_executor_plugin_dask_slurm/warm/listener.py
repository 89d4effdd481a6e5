"""The zygote's listening socket, in the abstract namespace: its name is in no environment,
known only to the processes forked from the zygote (:class:`.context.ZygoteContext`), and
a peer of another user is refused.

Two kinds of request come over it, each with the requesting process's stdin, stdout and
stderr attached as file descriptors: ``run`` of a group job's ``run:`` or ``shadow:``
member (:mod:`.member`) and ``script``, a warm job's Python script (:mod:`.script`). The
answers go back on the same connection.
"""

from __future__ import annotations

import os
import selectors
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import cast

from ..worker.warm_protocol import Inbox, Op, Outbox, Run, RunScript
from .member import close_fds

_PEERCRED = struct.Struct("3i")
#: What each request must carry to be taken (else it is not one of ours, and ignored).
REQUIRED = {
    Op.RUN: ("key", "argv", "env", "cwd"),
    Op.SCRIPT: ("key", "marker", "file", "env", "cwd", "pgid"),
}


@dataclass(eq=False)
class Connection:
    """A connection from a descendant of the zygote: a group job's process (one member's
    spawn) or a warm job's process (its script)."""

    sock: socket.socket
    outbox: Outbox
    inbox: Inbox = field(default_factory=Inbox)
    #: File descriptors received and not yet given to a request.
    fds: list[int] = field(default_factory=list)


class Listener:
    """The listening socket and its connections, read from the zygote's selector."""

    def __init__(self, address: str, selector: selectors.BaseSelector):
        self.selector = selector
        self.connections: dict[int, Connection] = {}
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(address)
        self.sock.listen(64)
        self.sock.setblocking(False)

    def socks(self) -> list[socket.socket]:
        """Every socket of it (to close in a process forked from the zygote)."""
        return [self.sock, *(c.sock for c in self.connections.values())]

    def accept(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
        _, uid, _ = _PEERCRED.unpack(creds)
        if uid != os.getuid():
            conn.close()
            return
        conn.setblocking(True)
        found = Connection(conn, Outbox(conn))
        self.connections[conn.fileno()] = found
        self.selector.register(conn, selectors.EVENT_READ, found)

    def read(self, found: Connection) -> Iterator[tuple[Run | RunScript, list[int]]]:
        """The requests one read of ``found`` completed, each with the file descriptors it
        came with (``fds`` of them); at its end (or a stream not of our protocol), the
        connection closed."""
        try:
            data, fds, _, _ = socket.recv_fds(found.sock, 1 << 16, 8)
        except OSError:
            data, fds = b"", []
        found.fds += fds
        try:
            msgs = found.inbox.feed(data) if data else None
        except ValueError:  # not our protocol: that peer is dropped, not the zygote
            msgs = None
        if msgs is None:
            self.selector.unregister(found.sock)
            self.connections.pop(found.sock.fileno(), None)
            found.sock.close()
            close_fds(found.fds)
            return
        for msg in msgs:
            op = msg.get("op")
            required = next((keys for kind, keys in REQUIRED.items() if op == kind), None)
            if required is None or not all(k in msg for k in required):
                continue  # not a request of ours
            wanted = int(msg.get("fds") or 0)
            taken, found.fds = found.fds[:wanted], found.fds[wanted:]
            yield cast(Run | RunScript, msg), taken
