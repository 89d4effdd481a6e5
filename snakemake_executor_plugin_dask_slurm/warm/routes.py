"""The zygote's routing: which primed server takes a job, or why it goes the cold way
(:func:`.tasks.refusal`, one check for a job and a prime alike), and what a server's
messages mean for its jobs. The loop that reads the sockets is :mod:`.zygote`'s.

Routing (:mod:`.tasks`): a job's key is its command's arguments without the per-job ones
(:func:`.snakemake_side.parse_key`), its environment and its working directory. A key
whose server said its workflow cannot go the warm way stays cold (the reason is sent with
every job of it); so does one whose sources changed over :data:`.tasks.STALE_LIMIT` times.

Its bookkeeping is in two tables, apart from its sockets and forks: its children (primed
servers and scripts' processes) by pid, with one reaper (:mod:`.children`), and a record
per task and per job command (:mod:`.tasks`).
"""

from __future__ import annotations

import contextlib
import os
import resource
import selectors
import signal
import socket
import sys
from collections.abc import Mapping
from typing import Any, cast

from ..worker import warm_protocol as protocol
from ..worker.warm_protocol import Op, Outbox, Received, encode
from ..worker.wire import Cold, Why
from . import member, script, script_run
from .child import fork_clean
from .children import Children, Script, ServerRecord
from .context import ZygoteContext
from .listener import Listener
from .primed import run_server
from .sources import Recorder, own_roots
from .tasks import PRIMING, Command, Tasks, command_key, priming, refusal


class Router:
    """The zygote's tables and its routing of each message; :class:`.zygote.Zygote`
    adds the loop that reads its sockets."""

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

    def checked(self, request: protocol.Run) -> tuple[str, Cold | None]:
        """A request's job command (its key), and why it cannot go warm (None: it can):
        :func:`.tasks.refusal`, for a job and a prime alike."""
        key = command_key(request, self.nargs)
        return key, refusal(request, self.commands.get(key), self.cwd)

    def run(self, request: protocol.Run) -> None:
        task = str(request["key"])
        record = self.tasks.open(task)
        key, cold = self.checked(request)
        if cold is not None:
            self.tasks.settle(task)
            self.send(protocol.GoCold(op=Op.COLD, key=task, cold=cold.to_wire()))
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
        key, cold = self.checked(first)
        if cold is None and self.children.server(self.command(key).server) is None:
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
            cold = Cold(Why.SCRIPT_NOT_FORKED, reason).to_wire()
            with contextlib.suppress(OSError):
                origin.send(protocol.GoCold(op=Op.COLD, key=task, cold=cold))
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
            found = Cold.from_wire(cast(protocol.Unsupported, msg).get("cold"))
            refused = found or Cold(Why.SERVER_FAILED, "it did not say why")
            server.refused = self.command(server.key).refused = refused
            # Into this warm process's log: a primed server that refused has no job to
            # carry the reason to the run's messages.
            print(
                f"dask-slurm warm path: the job command cannot go the warm way ({refused}); "
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
            if server.refused:  # refused before it forked anything (primed.run_server)
                cold = server.refused.to_wire()
                self.send(protocol.GoCold(op=Op.COLD, key=task, cold=cold))
            else:  # it may have forked the job just before it died: lost, not cold
                self.send(protocol.Lost(op=Op.LOST, key=task, reason=how))
            self.tasks.end(task)
        for task in sorted(server.running):
            self.send(protocol.Lost(op=Op.LOST, key=task, reason=how))
            self.tasks.end(task)

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
