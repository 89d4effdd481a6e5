"""The warm process beside one Dask worker: Snakemake imported once, a primed server per
job command (:mod:`.primed`), messages relayed between them and the worker.

Usage (the worker starts it; :mod:`..worker.warm_link`)::

    python -m snakemake_executor_plugin_dask_slurm.warm.zygote --fd N --cwd DIR

where ``N`` is its end of a socketpair with the worker and ``DIR`` the working directory
it was started in (only so that ``ps`` tells whose it is; its servers and job processes,
being forks, show the same command line). It is single-threaded (checked before it says
it is ready) and forks only servers; it never parses a workflow itself, so a server
primed after the workflow's sources changed starts from a process that never saw the old
ones (no module of the old parse in ``sys.modules``, no ``shell.prefix`` it set). A server
can be primed before its command's first job (:meth:`.routes.Router.prime`: the run's start).

This module is its start (:func:`main`: a ``failed`` message says why it could not) and its
loop over one selector; where each job goes is :mod:`.routes`'.

Requests come from the worker, and from group jobs' processes for their ``run:`` and
``shadow:`` members (:mod:`.member`) and warm jobs' processes for their Python scripts
(:mod:`.script`): those connect to the zygote's listening socket (:mod:`.listener`), send
one request with their stdin, stdout and stderr attached, and get its messages back there.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import selectors
import signal
import socket
import sys
import time
from collections.abc import Iterator
from typing import Any, NoReturn, cast

from ..worker import warm_protocol as protocol
from ..worker.warm_protocol import Inbox, Op, Outbox, hang_bounds
from ..worker.wire import Cold, Why
from . import marker, script, snakemake_side, thread_pools
from .child import record_signals
from .children import ServerRecord
from .context import ZygoteContext, listening_address
from .listener import Connection
from .primed import settle_threads
from .routes import Router
from .script import ScriptSetup
from .thread_pools import Pools


class Zygote(Router):
    """The zygote: its :class:`.routes.Router`, and the loop that feeds it."""

    def watch_servers(self, interval: float, bound: float) -> None:
        """Ask each primed server whether it answers; kill one that has not answered for
        ``bound`` seconds (its jobs then go as when it dies: :meth:`server_gone`)."""
        now = time.monotonic()
        for server in self.children.servers():
            if not server.primed or server.hung:
                continue
            if server.asked is None:
                sent = Outbox(server.sock).try_send(protocol.Ping(op=Op.PING))
                server.asked = now if sent != "broken" else now - bound
            if now - server.asked >= bound:
                server.hung = (
                    f"its warm server (pid {server.pid}) has not answered for {bound:.0f} s "
                    "(stopped, or blocked in the kernel): killed"
                )
                print(f"dask-slurm warm path: {server.hung}", file=sys.stderr, flush=True)
                if server.ended is None:  # (reaped: its pid may be another process's now)
                    with contextlib.suppress(OSError):
                        os.kill(server.pid, signal.SIGKILL)  # its socket closes: server_gone

    def serve(self) -> NoReturn:
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        self.selector.register(self.sock, selectors.EVENT_READ, "worker")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "wake")
        self.selector.register(self.listener.sock, selectors.EVENT_READ, "listener")
        inbox = Inbox()
        interval, bound = hang_bounds(os.environ)
        checked = time.monotonic()
        while True:
            self.reap()
            if time.monotonic() - checked >= interval:
                self.watch_servers(interval, bound)
                checked = time.monotonic()
            timeout = interval if self.children.servers() else None
            for item, _ in self.selector.select(timeout):
                if item.data == "wake":
                    with contextlib.suppress(OSError):
                        while os.read(self.wake_r, 4096):
                            pass
                elif item.data == "worker":
                    self.from_worker(inbox)
                elif item.data == "listener":
                    self.listener.accept()
                elif isinstance(item.data, Connection):
                    self.from_descendant(item.data)
                else:
                    self.read_server(item.data)

    def from_descendant(self, found: Connection) -> None:
        """Requests of a group's member or a warm script (:mod:`.listener`)."""
        for msg, fds in self.listener.read(found):
            record = self.tasks.open(str(msg["key"]))
            record.fds = fds
            if msg["op"] == Op.SCRIPT:
                self.run_script(msg, found.outbox)
                continue
            record.origin = found.outbox
            if msg.get("marker"):
                record.group = str(msg["marker"])
            self.run(msg)

    def from_worker(self, inbox: Inbox) -> None:
        try:
            data = self.sock.recv(1 << 16)
        except OSError:
            data = b""
        if not data:
            os._exit(0)  # the worker closed: its servers see this one go, and end
        for msg in inbox.feed(data):
            if msg.get("op") == Op.RUN:
                self.run(cast(protocol.Run, msg))
            elif msg.get("op") == Op.PRIME:
                self.prime(cast(protocol.Prime, msg))
            elif msg.get("op") == Op.PING:
                self.outbox.send(protocol.Pong(op=Op.PONG, n=cast(protocol.Ping, msg)["n"]))
            elif msg.get("op") == Op.EXIT:
                os._exit(0)

    def read_server(self, server: ServerRecord) -> None:
        try:
            data = server.sock.recv(1 << 16)
        except OSError:
            data = b""
        if not data:
            self.server_gone(server)
            return
        for msg in server.inbox.feed(data):
            self.from_server(server, msg)


def _load(address: str) -> tuple[dict[str, Any], Pools, ScriptSetup] | Cold:
    """Import Snakemake and what every job shares (the per-job flags' ``nargs``, the
    thread pools, the scripts' hook), or why this warm process cannot start.

    The import runs without the garbage collector, whose passes over the ~100,000 objects
    it makes are ~0.13 of its ~0.75 CPU-s (the first warm job waits for it), and what it
    made is frozen (:func:`gc.freeze`): no later collection here or in a fork walks it
    again (the primed server's before it freezes its parse's objects, a script's)."""
    if not marker.available():
        return Cold(Why.NO_MARKER_SLOT, f"no {marker.SLOT_VARIABLE} in /proc/self/environ")
    try:
        with thread_pools.loading_with_one_thread(), _collector_off():
            nargs = snakemake_side.load()
        pools = thread_pools.find_pools()
        scripts = script.install(address)
        threads = settle_threads()
    except snakemake_side.NotWarmable as e:
        return Cold(e.why, e.detail)
    except Exception as e:
        return Cold(Why.CANNOT_START, f"{type(e).__name__}: {e}")
    if threads > 1:
        return Cold(Why.IMPORT_THREADS, f"{threads - 1} thread(s)")
    return nargs, pools, scripts


@contextlib.contextmanager
def _collector_off() -> Iterator[None]:
    """No garbage collection inside; what was made meanwhile frozen after (the import's
    few thousand objects of cyclic garbage with it: kept, never walked)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was:
            gc.enable()


def main(argv: list[str] | None = None) -> None:
    dispositions = record_signals()  # before anything changes them: what `python` starts with
    initial_path = tuple(sys.path)  # what a script's `python FILE` has after its own dir
    parser = argparse.ArgumentParser(prog="dask-slurm warm zygote")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--cwd")
    args = parser.parse_args(argv)
    sock = socket.socket(fileno=args.fd)
    outbox = Outbox(sock)
    began = time.monotonic()
    address = listening_address()
    loaded = _load(address)
    if isinstance(loaded, Cold):
        outbox.send(protocol.Failed(op=Op.FAILED, cold=loaded.to_wire()))
        return
    nargs, pools, scripts = loaded
    base_env = {k: v for k, v in os.environ.items() if k != marker.SLOT_VARIABLE}
    context = ZygoteContext(address, dispositions, initial_path, base_env, scripts, pools)
    outbox.send(protocol.Ready(op=Op.READY, pid=os.getpid(), seconds=time.monotonic() - began))
    Zygote(sock, nargs, context).serve()


if __name__ == "__main__":
    main()
