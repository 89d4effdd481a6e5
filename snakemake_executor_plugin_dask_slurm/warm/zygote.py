"""The warm process beside one Dask worker: Snakemake imported once, a primed server per
job command (:mod:`.primed`), messages relayed between them and the worker.

Usage (the worker starts it; :mod:`..worker.warm_host`)::

    python -m snakemake_executor_plugin_dask_slurm.warm.zygote --fd N --cwd DIR

where ``N`` is its end of a socketpair with the worker and ``DIR`` the working directory
it was started in (only so that ``ps`` tells whose it is; its servers and job processes,
being forks, show the same command line). It is single-threaded (checked
before it says it is ready) and forks only servers; it never parses a workflow itself, so
a server primed after the workflow's sources changed starts from a process that never saw
the old ones (no module of the old parse in ``sys.modules``, no ``shell.prefix`` it set).

Routing: a job's key is its command's arguments without the per-job ones
(:func:`.snakemake_side.general_argv`), its environment and its working directory. A key
whose server said its workflow cannot go the warm way stays cold (the reason is sent
with every job of it); a key whose sources changed more than :data:`STALE_LIMIT` times
stays cold too.

Requests come from the worker, and from group jobs' processes for their ``run:`` and
``shadow:`` members (:mod:`.member`): those connect to the zygote's listening socket in
the abstract namespace (its name is in no environment; a peer of another user is
refused), send one request with their stdin, stdout and stderr attached, and get that
member's messages back on the same connection.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import selectors
import signal
import socket
import struct
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

from ..worker.proctree import JOB_MARKER
from ..worker.warm_protocol import Inbox, Op, Outbox, encode, hang_bounds
from . import marker, member, script, script_run, snakemake_side
from .child import record_signals
from .context import ZygoteContext, listening_address
from .primed import run_server, settle_threads
from .sources import Recorder

#: A key whose workflow sources changed more often than this goes the cold way.
STALE_LIMIT = 3
_PEERCRED = struct.Struct("3i")


@dataclass(eq=False)
class Member:
    """A connection from a group job's process (one member's spawn)."""

    sock: socket.socket
    outbox: Outbox
    inbox: Inbox = field(default_factory=Inbox)
    fds: list[int] = field(default_factory=list)


@dataclass
class ServerHandle:
    pid: int
    sock: socket.socket
    key: str
    inbox: Inbox = field(default_factory=Inbox)
    retired: bool = False
    #: Task keys sent to it that it has not started yet, and those it runs.
    sent: set[str] = field(default_factory=set)
    running: set[str] = field(default_factory=set)
    refusal: str | None = None
    #: It said something since it primed: from then on it must answer pings.
    primed: bool = False
    #: When the ping it has not answered yet was sent (None: none outstanding).
    asked: float | None = None
    #: Why it was killed, if it stopped answering.
    hung: str | None = None


class Zygote:
    def __init__(self, sock: socket.socket, nargs: Mapping[str, Any], context: ZygoteContext):
        self.sock = sock
        self.outbox = Outbox(sock)
        self.nargs = dict(nargs)
        self.context = context
        self.cwd = os.getcwd()
        self.recorder = Recorder(own_roots=_own_roots())
        self.recorder.install()
        self.servers: dict[int, ServerHandle] = {}
        self.by_key: dict[str, int] = {}
        self.refused: dict[str, str] = {}
        self.stale: dict[str, int] = {}
        self.requests: dict[str, dict[str, Any]] = {}
        #: Where each task's messages go: the worker, or a member's connection.
        self.origins: dict[str, Outbox] = {}
        #: File descriptors a member's request came with, until it started or went cold.
        self.fds: dict[str, list[int]] = {}
        self.members: dict[int, Member] = {}
        #: A group's warm member (its task key) -> the group job's task key; and what the
        #: group's members used so far, added to the group job's own figures when it ends
        #: (cold, they would be its waited-for descendants, counted by its ``wait4``).
        self.member_of: dict[str, str] = {}
        self.members_used: dict[str, tuple[float, int, int]] = {}
        #: A warm job's Python script's process (a child of this one, :mod:`.script`) ->
        #: its task key, its job's marker and where its messages go.
        self.scripts: dict[int, tuple[str, str, Outbox]] = {}
        self.selector = selectors.DefaultSelector()
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(context.address)  # known to the servers and jobs forked from here
        self.listener.listen(64)
        self.listener.setblocking(False)

    # -- routing ----------------------------------------------------------------------------

    def key_of(self, request: Mapping[str, Any]) -> str:
        argv = snakemake_side.general_argv(list(request["argv"]), self.nargs)
        env = sorted((str(k), str(v)) for k, v in request["env"])
        return json.dumps([argv, env, str(request["cwd"])])

    def why_cold(self, request: Mapping[str, Any]) -> str | None:
        if os.path.realpath(str(request["cwd"])) != os.path.realpath(self.cwd):
            return f"its working directory is not the warm process's ({self.cwd})"
        if request.get("python") not in (None, sys.executable):
            return f"its interpreter is not the warm process's ({sys.executable})"
        if not marker.fits(str(request.get("marker") or request["key"])):
            return f"its task key is too long for the {JOB_MARKER} marker of a forked process"
        if any(str(k) == JOB_MARKER for k, _ in request["env"]):
            return f"its environment sets {JOB_MARKER}"
        return None

    def run(self, request: dict[str, Any], origin: Outbox | None = None) -> None:
        task = str(request["key"])
        if origin is not None:
            self.origins[task] = origin
        reason = self.why_cold(request)
        key = self.key_of(request) if reason is None else ""
        reason = reason or self.refused.get(key)
        if reason is not None:
            self.settle(task)
            self.send({"op": Op.COLD, "key": task, "reason": reason})
            self.origins.pop(task, None)
            self.member_of.pop(task, None)  # cold, it is a process of its group job
            return
        pid = self.by_key.get(key)
        server = self.servers.get(pid) if pid is not None else None
        self.requests[task] = request
        if server is None:
            self.fork_server(key, request)
            return
        server.sent.add(task)
        self.to_server(server, request)

    def fork_server(self, key: str, first: dict[str, Any]) -> None:
        mine, theirs = socket.socketpair()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        task = str(first["key"])
        pid = os.fork()
        if pid == 0:
            self.close_in_child(task, mine)
            first = dict(first, _fds=self.fds.get(task, []))
            run_server(theirs, first, self.context, self.recorder)
        theirs.close()
        server = ServerHandle(pid, mine, key)
        server.sent.add(str(first["key"]))
        self.servers[pid] = server
        self.by_key[key] = pid
        self.selector.register(mine, selectors.EVENT_READ, pid)

    def close_in_child(self, task: str, *more: socket.socket) -> None:
        """In a process just forked from this one: close what is the zygote's (all but
        the file descriptors ``task`` came with)."""
        signal.set_wakeup_fd(-1)
        for fd in (self.wake_r, self.wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        for other, fds in self.fds.items():
            if other != task:
                member.close_fds(fds)
        socks = (self.sock, self.listener, *more, *(h.sock for h in self.servers.values()))
        for sock in (*socks, *(m.sock for m in self.members.values())):
            with contextlib.suppress(OSError):
                sock.close()

    # -- a warm job's Python script ----------------------------------------------------------

    def run_script(self, request: dict[str, Any], origin: Outbox) -> None:
        """Fork the script's process (:mod:`.script`); it reports ``started`` and
        ``exited`` to the job's process, or ``cold`` (then it runs it as before)."""
        task = str(request["key"])
        context = self.context
        reason = script.why_zygote_cannot(
            request, context.base_env, context.initial_path, context.scripts.pools_reason
        )
        if reason is not None:
            self.settle(task)
            with contextlib.suppress(OSError):
                origin.send({"op": Op.COLD, "key": task, "reason": reason})
            return
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        pid = os.fork()
        if pid == 0:
            fds = self.fds.get(task, [])
            self.close_in_child(task)
            script_run.become_script(request, fds, context)
        self.settle(task)
        with contextlib.suppress(OSError):  # also here: a kill after "started" must reach it
            os.setpgid(pid, int(request["pgid"]))
        self.scripts[pid] = (task, str(request["marker"]), origin)
        with contextlib.suppress(OSError):
            origin.send({"op": Op.STARTED, "key": task, "pid": pid})

    def reap_scripts(self) -> None:
        """Scripts' processes that ended: their status to their job's process, their
        figures kept for their job (added when it ends, as ``wait4`` of its process would
        count them cold, its shell's child)."""
        for pid in list(self.scripts):
            try:
                found, status, rusage = os.wait4(pid, os.WNOHANG)
            except ChildProcessError:
                found, status, rusage = pid, None, None
            if not found:
                continue
            task, job, origin = self.scripts.pop(pid)
            code = os.waitstatus_to_exitcode(status) if status is not None else 1
            running = any(job in h.running for h in self.servers.values())
            if rusage is not None and running:  # (a job killed with its script has ended)
                floor = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                used = (rusage.ru_utime + rusage.ru_stime, rusage.ru_maxrss, floor)
                self.members_used[job] = _together(self.members_used.get(job), used)
            with contextlib.suppress(OSError):  # that job's process is gone
                origin.send({"op": Op.EXITED, "key": task, "status": code})

    def to_server(self, server: ServerHandle, msg: dict[str, Any]) -> None:
        fds = self.fds.get(str(msg.get("key")), []) if msg.get("op") == Op.RUN else []
        with contextlib.suppress(OSError):  # a dead server's EOF settles its jobs
            if fds:
                socket.send_fds(server.sock, [encode(msg)], fds)
            else:
                Outbox(server.sock).send(msg)

    def settle(self, task: str) -> None:
        """A task started or will not: the file descriptors it came with are not needed."""
        member.close_fds(self.fds.pop(task, []))

    # -- from a server ------------------------------------------------------------------------

    def from_server(self, server: ServerHandle, msg: Mapping[str, Any]) -> None:
        op, task = msg.get("op"), str(msg.get("key"))
        server.primed, server.asked = True, None  # it answers
        if op == Op.PONG:
            return
        if op == Op.STARTED:
            server.sent.discard(task)
            server.running.add(task)
            self.requests.pop(task, None)
            self.settle(task)
            self.send({"op": Op.STARTED, "key": task, "pid": msg.get("pid")})
        elif op == Op.EXITED:
            server.running.discard(task)
            usage = self.add_members(task, msg.get("usage"))
            self.send({"op": Op.EXITED, "key": task, "status": msg.get("status"), "usage": usage})
            self.origins.pop(task, None)
        elif op == Op.UNSUPPORTED:
            reason = str(msg.get("reason"))
            server.refusal = self.refused[server.key] = reason
            self.retire(server)
        elif op == Op.STALE:
            server.sent.discard(task)
            self.retire(server)
            if msg.get("path") is not None:
                count = self.stale[server.key] = self.stale.get(server.key, 0) + 1
                if count > STALE_LIMIT:
                    self.refused[server.key] = (
                        f"the workflow's sources changed {count} times during the run (last: "
                        f"{msg.get('path')}): each change costs a new parse"
                    )
            request = self.requests.pop(task, None)
            if request is not None:
                self.run(request)

    def add_members(self, task: str, usage: Any) -> Any:
        """A member's figures are kept for its group job; a group job's get its members'."""
        group = self.member_of.pop(task, None)
        if group is not None:
            if _is_usage(usage):
                self.members_used[group] = _together(self.members_used.get(group), usage)
            return usage
        used = self.members_used.pop(task, None)
        return _together(used, usage) if used is not None and _is_usage(usage) else usage

    def retire(self, server: ServerHandle) -> None:
        if not server.retired:
            server.retired = True
            if self.by_key.get(server.key) == server.pid:
                del self.by_key[server.key]
            self.to_server(server, {"op": Op.RETIRE})

    def server_gone(self, server: ServerHandle) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(server.sock)
        server.sock.close()
        status = _reap(server.pid)
        self.servers.pop(server.pid, None)
        if self.by_key.get(server.key) == server.pid:
            del self.by_key[server.key]
        how = server.hung or f"its warm server (pid {server.pid}) {status}"
        for task in sorted(server.sent):
            self.requests.pop(task, None)
            self.settle(task)
            if server.refusal:  # refused before it forked anything: safe to run cold
                self.send({"op": Op.COLD, "key": task, "reason": server.refusal})
            else:  # it may have forked the job just before it died: lost, not cold
                self.send({"op": Op.LOST, "key": task, "reason": how})
            self.origins.pop(task, None)
        for task in sorted(server.running):
            self.send({"op": Op.LOST, "key": task, "reason": how})
            self.origins.pop(task, None)
        for task in (*server.sent, *server.running):
            self.member_of.pop(task, None)
            self.members_used.pop(task, None)

    # -- the loop ---------------------------------------------------------------------------

    def send(self, msg: dict[str, Any]) -> None:
        origin = self.origins.get(str(msg.get("key")))
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
        for server in list(self.servers.values()):
            if not server.primed or server.hung:
                continue
            if server.asked is None:
                sent = Outbox(server.sock).try_send({"op": Op.PING})
                server.asked = now if sent != "broken" else now - bound
            if now - server.asked >= bound:
                server.hung = (
                    f"its warm server (pid {server.pid}) has not answered for {bound:.0f} s "
                    "(stopped, or blocked in the kernel): killed"
                )
                print(f"dask-slurm warm path: {server.hung}", file=sys.stderr, flush=True)
                with contextlib.suppress(OSError):
                    os.kill(server.pid, signal.SIGKILL)  # its socket closes: server_gone

    def serve(self) -> NoReturn:
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        self.selector.register(self.sock, selectors.EVENT_READ, "worker")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "wake")
        self.selector.register(self.listener, selectors.EVENT_READ, "listener")
        inbox = Inbox()
        interval, bound = hang_bounds(os.environ)
        checked = time.monotonic()
        while True:
            self.reap_scripts()
            if time.monotonic() - checked >= interval:
                self.watch_servers(interval, bound)
                checked = time.monotonic()
            timeout = interval if self.servers else None
            for item, _ in self.selector.select(timeout):
                if item.data == "wake":
                    with contextlib.suppress(OSError):
                        while os.read(self.wake_r, 4096):
                            pass
                elif item.data == "worker":
                    self.from_worker(inbox)
                elif item.data == "listener":
                    self.accept()
                elif isinstance(item.data, Member):
                    self.from_member(item.data)
                else:
                    self.read_server(self.servers[item.data])

    def accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
        _, uid, _ = _PEERCRED.unpack(creds)
        if uid != os.getuid():
            conn.close()
            return
        conn.setblocking(True)
        found = Member(conn, Outbox(conn))
        self.members[conn.fileno()] = found
        self.selector.register(conn, selectors.EVENT_READ, found)

    def from_member(self, found: Member) -> None:
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
            self.members.pop(found.sock.fileno(), None)
            found.sock.close()
            member.close_fds(found.fds)
            return
        for msg in msgs:
            if msg.get("op") == Op.SCRIPT and all(
                k in msg for k in ("key", "marker", "file", "env", "cwd", "pgid")
            ):
                wanted = int(msg.get("fds") or 0)
                self.fds[str(msg["key"])], found.fds = found.fds[:wanted], found.fds[wanted:]
                self.run_script(msg, found.outbox)
                continue
            if msg.get("op") != Op.RUN:
                continue
            if not all(k in msg for k in ("key", "argv", "env", "cwd")):
                continue  # not a member's request
            if msg.get("marker"):
                self.member_of[str(msg["key"])] = str(msg["marker"])
            wanted = int(msg.get("fds") or 0)
            self.fds[str(msg["key"])], found.fds = found.fds[:wanted], found.fds[wanted:]
            self.run(msg, found.outbox)

    def from_worker(self, inbox: Inbox) -> None:
        try:
            data = self.sock.recv(1 << 16)
        except OSError:
            data = b""
        if not data:
            os._exit(0)  # the worker closed: its servers see this one go, and end
        for msg in inbox.feed(data):
            if msg.get("op") == Op.RUN:
                self.run(msg)
            elif msg.get("op") == Op.PING:
                self.outbox.send({"op": Op.PONG, "n": msg.get("n")})
            elif msg.get("op") == Op.EXIT:
                os._exit(0)

    def read_server(self, server: ServerHandle) -> None:
        try:
            data = server.sock.recv(1 << 16)
        except OSError:
            data = b""
        if not data:
            self.server_gone(server)
            return
        for msg in server.inbox.feed(data):
            self.from_server(server, msg)


def _reap(pid: int) -> str:
    """Wait (briefly) for a server whose socket closed; how it ended, in words."""
    for _ in range(200):
        try:
            found, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return "ended"
        if found:
            code = os.waitstatus_to_exitcode(status)
            return f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        time.sleep(0.005)
    return "closed its connection"


def _is_usage(usage: Any) -> bool:
    return isinstance(usage, list | tuple) and len(usage) == 3


def _together(a: Any, b: Any) -> tuple[float, int, int]:
    """Two processes' ``(cpu seconds, peak RSS, RSS floor)`` as ``wait4`` of a parent
    that waited for both would give them: CPU added, the larger peak (with its floor)."""
    if a is None:
        return (float(b[0]), int(b[1]), int(b[2]))
    cpu = float(a[0]) + float(b[0])
    peak = a if int(a[1]) >= int(b[1]) else b
    return (cpu, int(peak[1]), int(peak[2]))


def _own_roots() -> tuple[str, ...]:
    import snakemake

    roots = {os.path.dirname(snakemake.__file__), os.path.dirname(os.path.dirname(__file__))}
    return tuple(os.path.join(os.path.realpath(r), "") for r in roots)


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
        nargs = snakemake_side.load()
        scripts = script.install(address)
        threads = settle_threads()
        if threads > 1:
            raise snakemake_side.Unsupported(
                f"importing Snakemake and its plugins leaves {threads - 1} thread(s) running"
            )
    except Exception as e:
        reason = str(e) if isinstance(e, snakemake_side.Unsupported) else f"{type(e).__name__}: {e}"
        outbox.send({"op": Op.FAILED, "reason": reason})
        return
    base_env = {k: v for k, v in os.environ.items() if k != marker.SLOT_VARIABLE}
    context = ZygoteContext(address, dispositions, initial_path, base_env, scripts)
    outbox.send({"op": Op.READY, "pid": os.getpid(), "seconds": time.monotonic() - began})
    Zygote(sock, nargs, context).serve()


if __name__ == "__main__":
    main()
