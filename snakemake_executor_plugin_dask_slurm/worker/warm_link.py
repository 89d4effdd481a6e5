"""The worker's connection to its warm process (standard library only).

:class:`ZygoteLink` talks to one warm process (``warm.zygote``, the worker's child, started
by :func:`.warm_host.start_zygote`) over a socketpair (:mod:`.warm_protocol`): one thread
reads its messages, one asks it every interval whether it still answers. Whether a warm
process is wanted at all (started again after it died, or never again) is
:mod:`.warm_host`'s policy, not this.

A job's process is forked by the warm side, not by this worker, so :class:`WarmProc`
stands in for the ``Popen`` of a cold job where :mod:`.task` needs one: its pid leads the
job's process group (``kill_tasks`` signals that group), ``poll()`` and ``wait()`` follow
the warm process's messages. If the warm process (or the server that forked the job)
dies, ``wait()`` raises :class:`WarmLost`: the job's processes may still run, and
:mod:`.task` ends them before it runs the job the cold way.

A warm process that stops answering (stopped, blocked in the kernel, deadlocked: no
``pong`` within :data:`.warm_protocol.HANG_AFTER` of a ``ping``, asked every
:data:`.warm_protocol.PING_INTERVAL`) is killed, and its jobs go as when it dies; the
worker's log says so in one line. The zygote watches its primed servers the same way.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Protocol, cast

from .proctree import describe_exit
from .warm_protocol import (
    Exit,
    Exited,
    Failed,
    GoCold,
    Inbox,
    Lost,
    Op,
    Outbox,
    Ping,
    Received,
    Run,
    Started,
    hang_bounds,
    receive,
)
from .wire import Cold, TaskSpec, Why

#: Seconds a warm process may take to import Snakemake and say it is ready before it
#: counts as hung (a loaded node imports slowly; after that, HANG_AFTER applies).
START_LIMIT = 120.0


class WarmLost(Exception):
    """The warm process that ran a job died; the job's processes may still run."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class WarmProc:
    """A warm job's process: what ``Popen`` offers :mod:`.task`."""

    def __init__(self, key: str, pid: int):
        self.key = key
        self.pid = pid
        self.returncode: int | None = None
        self.lost: str | None = None
        #: What the job used, as the process that reaped it (its warm server) measured:
        #: user + system CPU seconds, peak RSS (KiB), and the server's own peak then,
        #: which the job's first process inherits (see worker.wire.Usage).
        self.cpu: float | None = None
        self.maxrss_kb: int | None = None
        self.floor_kb: int | None = None
        self._done = threading.Event()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self) -> int:
        self._done.wait()
        if self.lost is not None:
            raise WarmLost(self.lost)
        assert self.returncode is not None
        return self.returncode

    def _finish(self, returncode: int | None, lost: str | None = None) -> None:
        self.returncode, self.lost = returncode, lost
        self._done.set()


@dataclass
class Pending:
    """A job asked of the warm process: its process once started, or why it went cold."""

    event: threading.Event = field(default_factory=threading.Event)
    result: WarmProc | Cold | None = None

    def resolve(self, result: WarmProc | Cold) -> None:
        if self.result is None:
            self.result = result
            self.event.set()


def _lost(key: str, reason: str) -> WarmProc:
    """A job the warm side may have started before it died (its pid unknown: 0)."""
    proc = WarmProc(key, 0)
    proc._finish(None, reason)
    return proc


def could_not_start(refused: Cold) -> str:
    """What becomes of the jobs of a warm process that could not start (``refused``: its
    reason), said once: :attr:`Why.CANNOT_START`'s text says it already."""
    if refused.why is Why.CANNOT_START:
        return str(refused)
    return f"the warm process could not start: {refused}"


class WarmProcess(Protocol):
    """The warm process as its link needs it (:func:`.warm_host.start_zygote` starts it)."""

    pid: int

    def ended(self, timeout: float) -> int | None:
        """Its exit code once it ended, waiting up to ``timeout`` s (None: it runs)."""
        ...


class ZygoteLink:
    """One warm process and the thread that reads its messages."""

    def __init__(
        self, proc: WarmProcess, sock: socket.socket, python: str, cwd: str, log_path: str
    ):
        """``proc``, started by :func:`.warm_host.start_zygote` with the other end of
        ``sock``, runs ``python`` in ``cwd`` and writes its log to ``log_path``."""
        self.proc = proc
        self.python = python
        self.cwd = cwd
        self.alive = True
        #: Why it could not start (its ``failed`` message): every later job goes cold.
        self.refused: Cold | None = None
        #: How it ended, in words, once it died or was killed as hung.
        self.how: str | None = None
        self.pending: dict[str, Pending] = {}
        self.running: dict[str, WarmProc] = {}
        self._lock = threading.Lock()
        self.sock = mine = sock
        self.outbox = Outbox(mine)
        self.log_path = log_path
        self.ready = False
        self._heard = threading.Event()  # an answer to the last ping (or any message)
        self._closed = threading.Event()
        threading.Thread(target=self._read, name="dask-slurm-warm", daemon=True).start()
        threading.Thread(target=self._watch, name="dask-slurm-warm-watch", daemon=True).start()

    def request(self, spec: TaskSpec) -> Pending:
        assert spec.warm is not None
        pending = Pending()
        with self._lock:
            if not self.alive:  # (it ended since its host looked: never sent, so cold)
                pending.resolve(self.refused or Cold(Why.WARM_GONE, self.how or ""))
                return pending
            self.pending[spec.key] = pending
        msg = Run(
            op=Op.RUN,
            key=spec.key,
            argv=list(spec.warm.argv),
            env=[*spec.env, *spec.warm.exports],
            cwd=spec.cwd,
            log=spec.log_path,
            group=spec.warm.group,
        )
        with contextlib.suppress(OSError):  # the reader sees the end and settles it
            self.outbox.send(msg)
        return pending

    def _read(self) -> None:
        inbox = Inbox()
        while True:
            try:
                msgs = receive(self.sock, inbox)
            except ValueError:
                msgs = None
            if msgs is None:
                self._gone()
                return
            for msg in msgs:
                self._handle(msg)

    def _watch(self) -> None:
        """Ask the warm process every interval whether it answers; kill it if it has not
        answered for the hang bound (its jobs then go as when it dies, see _gone)."""
        interval, bound = hang_bounds(os.environ)
        began, n = time.monotonic(), 0
        while not self._closed.wait(interval):
            if not self.alive:
                return
            if not self.ready:
                if time.monotonic() - began > START_LIMIT:
                    self._kill_hung(f"did not say it was ready within {START_LIMIT:.0f} s")
                    return
                continue
            self._heard.clear()
            n += 1
            asked = time.monotonic()
            sent = self.outbox.try_send(Ping(op=Op.PING, n=n))
            if sent == "broken":
                self._kill_hung("could not be asked whether it still answers")
                return
            while not self._heard.wait(interval):
                if not self.alive or self._closed.is_set():
                    return
                if time.monotonic() - asked >= bound:
                    self._kill_hung(f"has not answered for {bound:.0f} s")
                    return

    def _kill_hung(self, what: str) -> None:
        reason = (
            f"the warm process (pid {self.proc.pid}) on {socket.gethostname()} {what} "
            "(stopped, or blocked in the kernel): killed"
        )
        with self._lock:
            if not self.alive:
                return
            self.how = reason
        print(f"dask-slurm: {reason}; its jobs run again the cold way", file=sys.stderr, flush=True)
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # its group: it and its servers
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # the reader then settles its jobs

    def _handle(self, msg: Received) -> None:
        op, key = msg.get("op"), str(msg.get("key"))
        self._heard.set()
        with self._lock:
            if op == Op.READY:
                self.ready = True
            elif op == Op.FAILED:
                found = Cold.from_wire(cast(Failed, msg).get("cold"))
                self.refused = found or Cold(Why.CANNOT_START, "it did not say why")
            elif op == Op.STARTED:
                pending = self.pending.pop(key, None)
                proc = WarmProc(key, int(cast(Started, msg)["pid"]))
                self.running[key] = proc
                if pending is not None:
                    pending.resolve(proc)
            elif op == Op.COLD:
                pending = self.pending.pop(key, None)
                if pending is not None:
                    found = Cold.from_wire(cast(GoCold, msg).get("cold"))
                    pending.resolve(found or Cold(Why.SERVER_FAILED, "it did not say why"))
            elif op == Op.LOST and key in self.pending:  # it may have started: never cold
                self.pending.pop(key).resolve(_lost(key, str(cast(Lost, msg).get("reason"))))
            elif op == Op.EXITED:
                exited = cast(Exited, msg)
                self._ended(key, exited.get("status"), exited.get("usage"), None)
            elif op == Op.LOST:  # (a lost job has no figures; read as an exit's would be)
                self._ended(key, None, msg.get("usage"), str(cast(Lost, msg).get("reason")))

    def _ended(self, key: str, status: object, usage: object, lost: str | None) -> None:
        """A running job's process ended (``exited``), or was lost with its warm process."""
        found = self.running.pop(key, None)
        if found is not None:
            if isinstance(usage, list | tuple) and len(usage) == 3:
                found.cpu, found.maxrss_kb, found.floor_kb = usage
            found._finish(int(status) if isinstance(status, int) else None, lost)

    def _gone(self) -> None:
        """The warm process closed its end: it died (or never started)."""
        code = self.proc.ended(timeout=5)
        how = describe_exit(code) if code is not None else "closed its connection"
        with self._lock:
            self.alive = False
            if self.how is not None:
                reason = self.how
            elif self.refused is not None:
                reason = could_not_start(self.refused)
            else:
                reason = f"the warm process (pid {self.proc.pid}) {how}"
            self.how = reason
            pending, self.pending = self.pending, {}
            running, self.running = self.running, {}
        for key, item in pending.items():  # it may have forked the job just before it died
            item.resolve(_lost(key, f"{reason} (its log: {self.log_path})"))
        for proc in running.values():
            proc._finish(None, reason)
        with contextlib.suppress(OSError):
            self.sock.close()

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self.outbox.send(Exit(op=Op.EXIT))
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
