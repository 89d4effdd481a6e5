"""The messages between a worker and its warm process (standard library only).

Each message is a JSON object, sent as a 4-byte big-endian length and the UTF-8 text, over
a Unix stream socket (a ``socketpair`` the worker creates: nobody else can connect to it).
Both sides send whole messages with one ``sendall`` under a lock, and read them with an
:class:`Inbox` that cuts a byte stream into messages (the warm process reads without
blocking, from a selector).

Worker -> warm process:

- ``{"op": "run", "key", "argv", "env", "cwd", "log", "group"}``: run one job: ``argv``
  are the arguments of ``python -m snakemake`` in Snakemake's job command, ``env`` what the
  job adds to the worker's environment, ``log`` where its output goes.
- ``{"op": "exit"}``: the worker is closing.
- ``{"op": "ping", "n"}``: answer ``pong`` with the same ``n`` (see :func:`hang_bounds`).

Warm process -> worker:

- ``{"op": "ready", "pid", "seconds"}`` / ``{"op": "failed", "reason"}``: once, at start.
- ``{"op": "started", "key", "pid"}``: the job's process runs (it leads its own group).
- ``{"op": "exited", "key", "status"}``: it ended (a return code; negative: a signal).
- ``{"op": "cold", "key", "reason"}``: it was not started; run it the cold way.
- ``{"op": "lost", "key", "reason"}``: the warm process that ran it died; its processes
  may still run (the worker ends them, then runs it the cold way).
- ``{"op": "pong", "n"}``: the answer to a ``ping``.

The zygote asks each primed server the same (``ping``/``pong``) once it has primed.

Between the zygote and a primed server (warm/primed.py): ``run`` and ``ping`` as above, and
``retire`` (fork no more, exit when the running jobs end); the server answers ``started``,
``exited`` (with the job's ``usage``), ``pong``, ``stale`` (``key``, ``path``: a file the
parse read has changed: the job goes to a new server) and ``unsupported`` (``reason``: this
job command cannot be primed: its jobs go cold). A warm job's process asks the zygote for
``script`` (a Python script's process, forked from it: warm/script.py), and a group's
warm process for ``run`` of a member (warm/member.py), over the zygote's abstract socket.

Every operation is one member of :class:`Op`; the wire carries its string.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
from collections.abc import Mapping
from enum import StrEnum
from typing import Any


class Op(StrEnum):
    """The operation of a warm-protocol message (its ``"op"``; see the module docstring)."""

    RUN = "run"  # run one job (worker -> zygote -> primed server; a group's member)
    EXIT = "exit"  # the worker is closing
    PING = "ping"  # do you still answer? (worker -> zygote, zygote -> primed server)
    PONG = "pong"  # the answer to a ping
    READY = "ready"  # the zygote has started
    FAILED = "failed"  # the zygote could not start
    STARTED = "started"  # the job's process runs
    EXITED = "exited"  # it ended
    COLD = "cold"  # it was not started: run it the cold way
    LOST = "lost"  # the warm process that ran it died
    RETIRE = "retire"  # a primed server: fork no more, exit when its jobs end
    SCRIPT = "script"  # a warm job's Python script: fork its process from the zygote
    UNSUPPORTED = "unsupported"  # a primed server cannot parse this job command
    STALE = "stale"  # a file the server's parse read has changed


#: The warm process's placeholder for the job marker of a forked job's process: an
#: environment item of fixed size that the job's process overwrites (warm/marker.py).
SLOT_VARIABLE = "DASK_SLURM_JOB_SLOT"
SLOT_BYTES = 512


def slot_value() -> str:
    """The placeholder's value: the whole ``NAME=value`` item is ``SLOT_BYTES`` long."""
    return "x" * (SLOT_BYTES - len(SLOT_VARIABLE) - 1)


#: Seconds between two questions whether a warm process still answers, and without an
#: answer for how long it counts as hung (stopped, blocked in the kernel, deadlocked) and
#: is killed, so that its jobs go as when it dies (run again cold, never two copies): the
#: worker asks its zygote, the zygote each primed server. Noticed within HANG_AFTER +
#: PING_INTERVAL (25 s) of the last answer.
PING_INTERVAL = 5.0
HANG_AFTER = 20.0
#: Overrides HANG_AFTER (seconds; the interval is a quarter of it): for the tests.
HANG_VARIABLE = "DASK_SLURM_WARM_HANG_AFTER"


def hang_bounds(env: Mapping[str, str]) -> tuple[float, float]:
    """(ping interval, hang bound) in seconds, from :data:`HANG_VARIABLE` if set."""
    try:
        after = float(env.get(HANG_VARIABLE, ""))
    except ValueError:
        return PING_INTERVAL, HANG_AFTER
    return (after / 4, after) if after > 0 else (PING_INTERVAL, HANG_AFTER)


_HEADER = struct.Struct("!I")
#: Larger messages are refused: a job's arguments are a few kB.
MAX_MESSAGE = 64 * 1024 * 1024


def encode(msg: dict[str, Any]) -> bytes:
    data = json.dumps(msg, separators=(",", ":")).encode()
    return _HEADER.pack(len(data)) + data


class Outbox:
    """Whole messages onto one socket, from any thread."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._lock = threading.Lock()

    def send(self, msg: dict[str, Any]) -> None:
        data = encode(msg)
        with self._lock:
            self.sock.sendall(data)

    def try_send(self, msg: dict[str, Any]) -> str:
        """Send ``msg`` without waiting, for a question to a process that may be hung:
        "sent"; "full" if nothing could be sent now (another sender is blocked, or the
        peer's buffer is full: it does not read); "broken" if only part of it went (the
        stream is cut mid-message) or the peer is gone."""
        data = encode(msg)
        if not self._lock.acquire(timeout=1.0):
            return "full"
        try:
            sent = self.sock.send(data, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return "full"
        except OSError:
            return "broken"
        finally:
            self._lock.release()
        return "sent" if sent == len(data) else "broken"


class Inbox:
    """Cuts a byte stream into messages."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        self._buffer += data
        found = []
        while len(self._buffer) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self._buffer)
            if size > MAX_MESSAGE:
                raise ValueError(f"message of {size} bytes refused")
            end = _HEADER.size + size
            if len(self._buffer) < end:
                break
            msg = json.loads(bytes(self._buffer[_HEADER.size : end]))
            del self._buffer[:end]
            if isinstance(msg, dict):
                found.append(msg)
        return found


def receive(sock: socket.socket, inbox: Inbox) -> list[dict[str, Any]] | None:
    """The messages of one (blocking) read; None at the end of the stream."""
    try:
        data = sock.recv(1 << 16)
    except (ConnectionResetError, BrokenPipeError):
        return None
    if not data:
        return None
    return inbox.feed(data)
