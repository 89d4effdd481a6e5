"""The worker's side of the warm path (standard library only).

One warm process (``warm.zygote``) runs beside each worker, as the worker's child: started
at the first job that can go the warm way, with the interpreter and working directory of
that job's command, and this worker's environment. The worker talks to it over a
socketpair (:mod:`.warm_protocol`); the Dask worker has threads and an event loop, the
warm process has neither, so only it forks.

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

A warm process that dies is started again at the next job, up to :data:`RESTART_LIMIT`
times; one that cannot start (Snakemake's internals changed, no ``/proc``) is not tried
again: this worker's jobs then go the cold way, each with the reason.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from .proctree import JOB_MARKER, describe_exit
from .warm_protocol import (
    SLOT_VARIABLE,
    Cold,
    Exit,
    Exited,
    Failed,
    Inbox,
    Lost,
    Op,
    Outbox,
    Ping,
    Prime,
    Received,
    Run,
    Started,
    hang_bounds,
    receive,
    slot_value,
)
from .wire import TaskSpec

ZYGOTE_MODULE = "snakemake_executor_plugin_dask_slurm.warm.zygote"
#: A worker whose warm process died this often runs the rest of its jobs the cold way.
RESTART_LIMIT = 3
#: Seconds a warm process may take to import Snakemake and say it is ready before it
#: counts as hung (a loaded node imports slowly; after that, HANG_AFTER applies).
START_LIMIT = 120.0
#: In a worker's environment: a JSON file naming a job command for its warm process to
#: parse at the worker's start (:meth:`WarmHost.prime`, written by the run's start).
PRIME_VARIABLE = "DASK_SLURM_WARM_PRIME"


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
class _Pending:
    event: threading.Event = field(default_factory=threading.Event)
    result: WarmProc | str | None = None

    def resolve(self, result: WarmProc | str) -> None:
        if self.result is None:
            self.result = result
            self.event.set()


def _lost(key: str, reason: str) -> WarmProc:
    """A job the warm side may have started before it died (its pid unknown: 0)."""
    proc = WarmProc(key, 0)
    proc._finish(None, reason)
    return proc


class _Zygote:
    """One warm process and the thread that reads its messages."""

    def __init__(self, python: str, cwd: str, log_path: str):
        self.python = python
        self.cwd = cwd
        self.alive = True
        self.failed: str | None = None
        self.pending: dict[str, _Pending] = {}
        self.running: dict[str, WarmProc] = {}
        self._lock = threading.Lock()
        mine, theirs = socket.socketpair()
        env = dict(os.environ)
        env.pop(JOB_MARKER, None)
        env[SLOT_VARIABLE] = slot_value()
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
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
        theirs.close()
        self.sock = mine
        self.outbox = Outbox(mine)
        self.log_path = log_path
        self.ready = False
        self._heard = threading.Event()  # an answer to the last ping (or any message)
        self._closed = threading.Event()
        threading.Thread(target=self._read, name="dask-slurm-warm", daemon=True).start()
        threading.Thread(target=self._watch, name="dask-slurm-warm-watch", daemon=True).start()

    def request(self, spec: TaskSpec) -> _Pending:
        assert spec.warm is not None
        pending = _Pending()
        with self._lock:
            if not self.alive:
                pending.resolve(self.failed or "the warm process is gone")
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
            self.failed = reason
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
                reason = cast(Failed, msg).get("reason")
                self.failed = f"the warm process could not start: {reason}"
            elif op == Op.STARTED:
                pending = self.pending.pop(key, None)
                proc = WarmProc(key, int(cast(Started, msg)["pid"]))
                self.running[key] = proc
                if pending is not None:
                    pending.resolve(proc)
            elif op == Op.COLD:
                pending = self.pending.pop(key, None)
                if pending is not None:
                    pending.resolve(str(cast(Cold, msg).get("reason")))
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
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        code = self.proc.poll()
        how = describe_exit(code) if code is not None else "closed its connection"
        with self._lock:
            self.alive = False
            reason = self.failed or f"the warm process (pid {self.proc.pid}) {how}"
            self.failed = reason
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


def warm_log(log_dir: str) -> str:
    """This worker's warm process's log in ``log_dir``."""
    return os.path.join(log_dir, f"warm-{socket.gethostname()}-{os.getpid()}.log")


class WarmHost:
    """This worker's warm process: started at the first warm job, again after it died."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._zygote: _Zygote | None = None
        self._deaths = 0
        self._disabled: str | None = None

    def start(self, spec: TaskSpec) -> WarmProc | str:
        """Start ``spec``'s job on the warm path: its process, or why it goes the cold way.
        Blocks while the warm process starts or parses the workflow (no time limit: a
        parse that hangs would hang the cold way's job too; the job stays killable)."""
        warm = spec.warm
        assert warm is not None
        with self._lock:
            zygote = self._zygote
            if zygote is not None and not zygote.alive:
                if zygote.failed and zygote.failed.startswith("the warm process could not start"):
                    self._disabled = zygote.failed
                else:
                    self._deaths += 1
                    if self._deaths > RESTART_LIMIT:
                        self._disabled = (
                            f"the warm process of this worker died {self._deaths} times "
                            f"(last: {zygote.failed})"
                        )
                zygote = self._zygote = None
            if self._disabled is not None:
                return self._disabled
            if zygote is None:
                try:
                    zygote = self._zygote = _Zygote(warm.python, spec.cwd, warm_log(warm.log_dir))
                except OSError as e:
                    self._disabled = f"the warm process could not be started: {e}"
                    return self._disabled
            if zygote.python != warm.python:
                return f"its interpreter ({warm.python}) is not the warm process's"
            pending = zygote.request(spec)
        pending.event.wait()
        assert pending.result is not None
        return pending.result

    def prime(self, request: Mapping[str, Any]) -> bool:
        """Start the warm process now, and have it parse ``request``'s job command (its
        ``python``, ``argv``, ``env``, ``cwd``, ``log_dir``: what a warm job's spec holds)
        before the first warm job arrives; nothing waits for it. False if it did not (a
        warm process there already, or none can start: the first warm job then says why)."""
        with self._lock:
            if self._zygote is not None or self._disabled is not None:
                return False
            log = warm_log(str(request["log_dir"]))
            try:
                zygote = self._zygote = _Zygote(str(request["python"]), str(request["cwd"]), log)
            except OSError:
                return False
        msg = Prime(
            op=Op.PRIME,
            argv=[str(a) for a in request["argv"]],
            env=[(str(k), str(v)) for k, v in request["env"]],
            cwd=str(request["cwd"]),
        )
        with contextlib.suppress(OSError):
            zygote.outbox.send(msg)
        return True

    def pids(self) -> set[int]:
        """The warm process: a child of this worker that is no job's."""
        zygote = self._zygote
        return {zygote.proc.pid} if zygote is not None else set()

    def close(self) -> None:
        zygote = self._zygote
        if zygote is not None:
            zygote.close()


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
