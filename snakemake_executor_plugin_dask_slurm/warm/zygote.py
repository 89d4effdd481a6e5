"""The warm process beside one Dask worker: Snakemake imported once, a primed server per
job command (:mod:`.primed`), messages relayed between them and the worker.

Usage (the worker starts it; :mod:`..worker.warm_host`)::

    python -m snakemake_executor_plugin_dask_slurm.warm.zygote --fd N --cwd DIR

where ``N`` is its end of a socketpair with the worker and ``DIR`` the working directory
it was started in (only so that ``ps`` tells whose it is; its servers and job processes,
being forks, show the same command line). It is single-threaded (checked before it says
it is ready) and forks only servers; it never parses a workflow itself, so a server
primed after the workflow's sources changed starts from a process that never saw the old
ones (no module of the old parse in ``sys.modules``, no ``shell.prefix`` it set). A server
can be primed before its command's first job (:meth:`Zygote.prime`: the run's start).

Routing (:mod:`.tasks`): a job's key is its command's arguments without the per-job ones
(:func:`.snakemake_side.general_argv`), its environment and its working directory. A key
whose server said its workflow cannot go the warm way stays cold (the reason is sent with
every job of it); so does one whose sources changed over :data:`.tasks.STALE_LIMIT` times.

Requests come from the worker, and from group jobs' processes for their ``run:`` and
``shadow:`` members (:mod:`.member`) and warm jobs' processes for their Python scripts
(:mod:`.script`): those connect to the zygote's listening socket (:mod:`.listener`), send
one request with their stdin, stdout and stderr attached, and get its messages back there.

Its bookkeeping is in two tables, apart from its sockets and forks: its children (primed
servers and scripts' processes) by pid, with one reaper (:mod:`.children`), and a record
per task and per job command (:mod:`.tasks`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import selectors
import signal
import socket
import sys
import time
from collections.abc import Mapping
from typing import Any, NoReturn, cast

from ..worker import warm_protocol as protocol
from ..worker.warm_protocol import Inbox, Op, Outbox, Received, encode, hang_bounds
from . import marker, member, script, script_run, snakemake_side, thread_pools
from .child import fork_clean, record_signals
from .children import Children, Script, ServerRecord
from .context import ZygoteContext, listening_address
from .listener import Connection, Listener
from .primed import run_server, settle_threads
from .sources import Recorder, own_roots
from .tasks import PRIMING, Command, Tasks, command_key, priming, why_cold


class Zygote:
    def __init__(self, sock: socket.socket, nargs: Mapping[str, Any], context: ZygoteContext):
        self.sock = sock
        self.outbox = Outbox(sock)
        self.nargs = dict(nargs)
        self.context = context
        self.cwd = os.getcwd()
        self.recorder = Recorder(own_roots=own_roots())
        self.recorder.install()
        #: Its primed servers and scripts' processes, by pid (:mod:`.children`).
        self.children = Children()
        #: Each task handled, and each job command (the key of one parse): :mod:`.tasks`.
        self.tasks = Tasks()
        self.commands: dict[str, Command] = {}
        self.selector = selectors.DefaultSelector()
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.listener = Listener(context.address, self.selector)

    # -- routing ----------------------------------------------------------------------------

    def command(self, key: str) -> Command:
        return self.commands.setdefault(key, Command())

    def run(self, request: protocol.Run) -> None:
        task = str(request["key"])
        record = self.tasks.open(task)
        reason = why_cold(request, self.cwd)
        key = command_key(request, self.nargs) if reason is None else ""
        reason = reason or self.command(key).refused
        if reason is not None:
            self.tasks.settle(task)
            self.send(protocol.Cold(op=Op.COLD, key=task, reason=reason))
            self.tasks.end(task)  # cold, a member is a process of its group job
            return
        server = self.children.server(self.command(key).server)
        record.request = request
        if server is None:
            self.fork_server(key, request)
            return
        server.sent.add(task)
        self.to_server(server, request)

    def prime(self, request: protocol.Prime) -> None:
        """Fork the primed server of a job command before its first job (the run knew it
        at its start). Nothing is answered: a command that cannot go the warm way, or
        whose server is there already, is left to its jobs."""
        first = priming(request)
        key = command_key(first, self.nargs) if why_cold(first, self.cwd) is None else ""
        command = self.command(key)
        if key and command.refused is None and self.children.server(command.server) is None:
            print(f"dask-slurm warm path: {PRIMING}", file=sys.stderr, flush=True)
            self.fork_server(key, first)

    def fork_server(self, key: str, first: protocol.Run) -> None:
        mine, theirs = socket.socketpair()
        task = str(first["key"])
        pid = fork_clean()
        if pid == 0:
            self.close_in_child(task, mine)
            first = {**first, "_fds": self.tasks.fds(task)}
            run_server(theirs, first, self.context, self.recorder)
        theirs.close()
        server = ServerRecord(pid, mine, key)
        if not first.get("prime"):
            server.sent.add(task)
        self.children.add(server)
        self.command(key).server = pid
        self.selector.register(mine, selectors.EVENT_READ, server)

    def close_in_child(self, task: str, *more: socket.socket) -> None:
        """In a process just forked from this one: close what is the zygote's (all but
        the file descriptors ``task`` came with)."""
        signal.set_wakeup_fd(-1)
        for fd in (self.wake_r, self.wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        for other, record in self.tasks:
            if other != task:
                member.close_fds(record.fds)
        socks = (self.sock, *more, *(h.sock for h in self.children.servers()))
        for sock in (*socks, *self.listener.socks()):
            with contextlib.suppress(OSError):
                sock.close()

    # -- a warm job's Python script ----------------------------------------------------------

    def run_script(self, request: protocol.RunScript, origin: Outbox) -> None:
        """Fork the script's process (:mod:`.script`); it reports ``started`` and
        ``exited`` to the job's process, or ``cold`` (then it runs it as before)."""
        task = str(request["key"])
        context = self.context
        reason = script.why_zygote_cannot(
            request, context.base_env, context.initial_path, context.pools.reason
        )
        if reason is not None:
            self.tasks.settle(task)
            self.tasks.end(task)
            with contextlib.suppress(OSError):
                origin.send(protocol.Cold(op=Op.COLD, key=task, reason=reason))
            return
        pid = fork_clean()
        if pid == 0:
            fds = self.tasks.fds(task)
            self.close_in_child(task)
            script_run.become_script(request, fds, context)
        self.tasks.settle(task)
        self.tasks.end(task)  # its messages go to its job's process: its child's record
        with contextlib.suppress(OSError):  # also here: a kill after "started" must reach it
            os.setpgid(pid, int(request["pgid"]))
        self.children.add(Script(pid, task, str(request["marker"]), origin))
        with contextlib.suppress(OSError):
            origin.send(protocol.Started(op=Op.STARTED, key=task, pid=pid))

    def reap(self) -> None:
        """Children that ended: a script's status to its job's process, its figures kept
        for its job (added when it ends, as ``wait4`` of its process would count them
        cold, its shell's child); a server's kept until its socket's end is read."""
        for ended in self.children.reap():
            status, rusage = ended.status, ended.rusage
            code = os.waitstatus_to_exitcode(status) if status is not None else 1
            running = self.children.runs(ended.job)
            if rusage is not None and running:  # (a job killed with its script has ended)
                floor = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                self.tasks.add_used(
                    ended.job, (rusage.ru_utime + rusage.ru_stime, rusage.ru_maxrss, floor)
                )
            with contextlib.suppress(OSError):  # that job's process is gone
                ended.origin.send(protocol.Exited(op=Op.EXITED, key=ended.key, status=code))

    def to_server(self, server: ServerRecord, msg: protocol.Run | protocol.Retire) -> None:
        fds = self.tasks.fds(str(msg["key"])) if msg["op"] == Op.RUN else []
        with contextlib.suppress(OSError):  # a dead server's EOF settles its jobs
            if fds:
                socket.send_fds(server.sock, [encode(msg)], fds)
            else:
                Outbox(server.sock).send(msg)

    # -- from a server ------------------------------------------------------------------------

    def from_server(self, server: ServerRecord, msg: Received) -> None:
        op, task = msg.get("op"), str(msg.get("key"))
        server.primed, server.asked = True, None  # it answers
        if op == Op.PONG:
            return
        if op == Op.STARTED:
            server.sent.discard(task)
            server.running.add(task)
            self.tasks.take_request(task)
            self.tasks.settle(task)
            pid = cast(protocol.Started, msg)["pid"]
            self.send(protocol.Started(op=Op.STARTED, key=task, pid=pid))
        elif op == Op.EXITED:
            server.running.discard(task)
            exited = cast(protocol.Exited, msg)
            usage = self.tasks.add_members(task, exited.get("usage"))
            status = exited["status"]
            self.send(protocol.Exited(op=Op.EXITED, key=task, status=status, usage=usage))
            self.tasks.end(task)
        elif op == Op.UNSUPPORTED:
            reason = str(cast(protocol.Unsupported, msg).get("reason"))
            server.refusal = self.command(server.key).refused = reason
            # Into this warm process's log: a primed server that refused has no job to
            # carry the reason to the run's messages.
            print(
                f"dask-slurm warm path: the job command cannot go the warm way ({reason}); "
                "its jobs go the cold way", file=sys.stderr, flush=True,
            )  # fmt: skip
            self.retire(server)
        elif op == Op.STALE:
            server.sent.discard(task)
            self.retire(server)
            path = cast(protocol.Stale, msg).get("path")
            if path is not None:
                self.command(server.key).changed(path)
            request = self.tasks.take_request(task)
            if request is not None:
                self.run(request)

    def retire(self, server: ServerRecord) -> None:
        if not server.retired:
            server.retired = True
            self.forget_server(server)
            self.to_server(server, protocol.Retire(op=Op.RETIRE))

    def forget_server(self, server: ServerRecord) -> None:
        """New jobs of its command go to another server."""
        command = self.commands.get(server.key)
        if command is not None and command.server == server.pid:
            command.server = None

    def server_gone(self, server: ServerRecord) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(server.sock)
        server.sock.close()
        status = self.children.server_ended(server)
        self.children.remove(server)
        self.forget_server(server)
        how = server.hung or f"its warm server (pid {server.pid}) {status}"
        for task in sorted(server.sent):
            self.tasks.take_request(task)
            self.tasks.settle(task)
            if server.refusal:  # refused before it forked anything: safe to run cold
                self.send(protocol.Cold(op=Op.COLD, key=task, reason=server.refusal))
            else:  # it may have forked the job just before it died: lost, not cold
                self.send(protocol.Lost(op=Op.LOST, key=task, reason=how))
            self.tasks.end(task)
        for task in sorted(server.running):
            self.send(protocol.Lost(op=Op.LOST, key=task, reason=how))
            self.tasks.end(task)

    # -- the loop ---------------------------------------------------------------------------

    def send(self, msg: protocol.JobMessage) -> None:
        origin = self.tasks.origin(str(msg["key"]))
        if origin is not None:
            with contextlib.suppress(OSError):  # that group job's process is gone
                origin.send(msg)
            return
        try:
            self.outbox.send(msg)
        except OSError:  # the worker is gone
            os._exit(0)

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
    try:
        if not marker.available():
            raise snakemake_side.Unsupported(
                f"this process has no {marker.SLOT_VARIABLE} slot in /proc/self/environ "
                "(not Linux?), so a forked job's processes could not carry their marker"
            )
        with thread_pools.loading_with_one_thread():
            nargs = snakemake_side.load()
        pools = thread_pools.find_pools()
        scripts = script.install(address)
        threads = settle_threads()
        if threads > 1:
            raise snakemake_side.Unsupported(
                f"importing Snakemake and its plugins leaves {threads - 1} thread(s) running"
            )
    except Exception as e:
        reason = str(e) if isinstance(e, snakemake_side.Unsupported) else f"{type(e).__name__}: {e}"
        outbox.send(protocol.Failed(op=Op.FAILED, reason=reason))
        return
    base_env = {k: v for k, v in os.environ.items() if k != marker.SLOT_VARIABLE}
    context = ZygoteContext(address, dispositions, initial_path, base_env, scripts, pools)
    outbox.send(protocol.Ready(op=Op.READY, pid=os.getpid(), seconds=time.monotonic() - began))
    Zygote(sock, nargs, context).serve()


if __name__ == "__main__":
    main()
