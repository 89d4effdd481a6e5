"""The messages between a worker and its warm process (standard library only).

Each message is a JSON object, sent as a 4-byte big-endian length and the UTF-8 text, over
a Unix stream socket (a ``socketpair`` the worker creates: nobody else can connect to it).
Both sides send whole messages with one ``sendall`` under a lock, and read them with an
:class:`Inbox` that cuts a byte stream into messages (the warm process reads without
blocking, from a selector).

Every operation is one member of :class:`Op` (the wire carries its string), and every
message one ``TypedDict`` below, which both sides import: they build messages with it and
read a message as it once its ``op`` is known (the wire is JSON: readers still read with
``.get`` what they do not rely on). A reason a job goes the cold way travels as a
:class:`.wire.Cold`'s wire form (``cold: [why, detail]``), never as prose.

- Worker -> warm process: :class:`Run` (one job), :class:`Prime` (parse a job command
  before its first job; nothing is answered), :class:`Exit` (the worker is closing),
  :class:`Ping` (answer :class:`Pong` with the same ``n``; see :func:`hang_bounds`).
- Warm process -> worker: :class:`Ready` or :class:`Failed` (once, at start),
  :class:`Started` (the job's process runs, leading its own group), :class:`Exited` (it
  ended), :class:`GoCold` (it was not started: run it the cold way), :class:`Lost` (the
  warm process that ran it died; its processes may still run: the worker ends them, then
  runs it the cold way), :class:`Pong`.
- The zygote and a primed server (warm/primed.py): :class:`Run` and :class:`Ping` as
  above, and :class:`Retire` (fork no more, exit when the running jobs end); the server
  answers :class:`Started`, :class:`Exited` (with the job's ``usage``), :class:`Pong`,
  :class:`Stale` (a file the parse read has changed: the job goes to a new server) and
  :class:`Unsupported` (this job command cannot be primed: its jobs go cold).
- Over the zygote's abstract socket: a warm job's process asks for :class:`RunScript` (a
  Python script's process, forked from the zygote: warm/script.py), and a group's warm
  process for :class:`Run` of a member (warm/member.py); the answers are the worker's.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any, Literal, NotRequired, TypedDict


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
    PRIME = "prime"  # parse a job command now, before its first job (worker -> zygote)


#: An environment as the wire carries it: (name, value) pairs.
Pairs = Sequence[tuple[str, str]]


class Run(TypedDict):
    """Run one job: ``argv`` are the arguments of ``python -m snakemake`` in Snakemake's
    job command, ``env`` what the job adds to the worker's environment."""

    op: Literal[Op.RUN]
    key: str
    argv: Sequence[str]
    env: Pairs
    cwd: str
    #: From the worker: where the job's output goes, and whether it is a group job.
    log: NotRequired[str]
    group: NotRequired[bool]
    #: From a group's member (warm/member.py): its group job's key (its marker), its whole
    #: environment, its interpreter, its group job's process group, how many file
    #: descriptors (stdin, stdout, stderr) came with it.
    marker: NotRequired[str]
    full_env: NotRequired[bool]
    python: NotRequired[str]
    pgid: NotRequired[int]
    fds: NotRequired[int]
    #: Added where it is received: those file descriptors.
    _fds: NotRequired[list[int]]
    #: Set by the zygote on the request a server is forked with for a :class:`Prime`: the
    #: server parses the workflow and runs nothing.
    prime: NotRequired[bool]


class Prime(TypedDict):
    """Parse the job command ``argv`` (as in :class:`Run`) before its first job: the run
    knows it at its start (executor/run.py), so the zygote forks its primed server at
    once, and the command's first job finds the workflow parsed."""

    op: Literal[Op.PRIME]
    argv: Sequence[str]
    env: Pairs
    cwd: str


class RunScript(TypedDict):
    """Fork a warm job's Python script's process from the zygote (warm/script.py)."""

    op: Literal[Op.SCRIPT]
    key: str
    marker: str
    file: str
    env: Pairs
    cwd: str
    pgid: int
    fds: int


class Exit(TypedDict):
    op: Literal[Op.EXIT]


class Ping(TypedDict):
    op: Literal[Op.PING]
    n: NotRequired[int]  # the worker's count (the zygote asks its servers without one)


class Pong(TypedDict):
    op: Literal[Op.PONG]
    n: NotRequired[int]


class Ready(TypedDict):
    op: Literal[Op.READY]
    pid: int
    seconds: float


#: A :class:`.wire.Cold` as the wire carries it (``Cold.to_wire()``: ``[why, detail]``).
ColdWire = list[str]


class Failed(TypedDict):
    """The zygote could not start: why (``{"op": "failed", "cold": ["internals-changed",
    "Snakemake 9.1's internals ..."]}``); every later job of its worker goes cold."""

    op: Literal[Op.FAILED]
    cold: ColdWire


class Started(TypedDict):
    op: Literal[Op.STARTED]
    key: str
    pid: int


class Exited(TypedDict):
    """The job's process ended: its return code (negative: a signal), and what it used
    as the process that reaped it measured (CPU seconds, peak RSS, that process's own
    peak: see worker.wire.Usage)."""

    op: Literal[Op.EXITED]
    key: str
    status: int
    usage: NotRequired[Sequence[float] | None]


class GoCold(TypedDict):
    """The job was not started: run it the cold way, for this reason
    (``{"op": "cold", "key": "k", "cold": ["other-cwd", "/w"]}``)."""

    op: Literal[Op.COLD]
    key: str
    cold: ColdWire


class Lost(TypedDict):
    op: Literal[Op.LOST]
    key: str
    reason: str


class Retire(TypedDict):
    op: Literal[Op.RETIRE]


class Stale(TypedDict):
    op: Literal[Op.STALE]
    key: str
    #: The file that changed (None: the server had retired already).
    path: str | None


class Unsupported(TypedDict):
    """A primed server cannot parse its job command warm: why (its jobs go cold)."""

    op: Literal[Op.UNSUPPORTED]
    cold: ColdWire


#: Any message of the protocol.
Message = (
    Run | RunScript | Exit | Ping | Pong | Ready | Failed | Started | Exited | GoCold | Lost
    | Retire | Stale | Unsupported | Prime
)  # fmt: skip
#: The warm side's messages about one job (each carries its key).
JobMessage = Started | Exited | GoCold | Lost
#: A message as it comes off the wire (JSON), before its ``op`` is looked at.
Received = dict[str, Any]


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


def encode(msg: Message) -> bytes:
    data = json.dumps(msg, separators=(",", ":")).encode()
    return _HEADER.pack(len(data)) + data


class Outbox:
    """Whole messages onto one socket, from any thread."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._lock = threading.Lock()

    def send(self, msg: Message) -> None:
        data = encode(msg)
        with self._lock:
            self.sock.sendall(data)

    def try_send(self, msg: Message) -> str:
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

    def feed(self, data: bytes) -> list[Received]:
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


def receive(sock: socket.socket, inbox: Inbox) -> list[Received] | None:
    """The messages of one (blocking) read; None at the end of the stream."""
    try:
        data = sock.recv(1 << 16)
    except (ConnectionResetError, BrokenPipeError):
        return None
    if not data:
        return None
    return inbox.feed(data)
