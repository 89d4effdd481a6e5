"""A primed server: forked from the zygote for one job command (its key), it parses the
workflow once, as that command would, then forks one child per job (:mod:`.child`).

It is single-threaded whenever it forks: the parse's thread pool is shut down and
OpenBLAS's threads (numpy, imported by Snakemake) end at a fork by their own handler; a
parse that leaves any other thread running makes the key go the cold way. Its loop waits
on one selector: its socket to the zygote, and a wakeup pipe for SIGCHLD.

Messages to the zygote: ``started`` / ``exited`` per job (:mod:`..worker.warm_protocol`),
``stale`` when a job finds the workflow's sources changed (the zygote then primes a new
server and retires this one, which ends once its running jobs did), ``unsupported`` when
the parse showed that this workflow cannot go the warm way (then it ends).
"""

from __future__ import annotations

import contextlib
import gc
import os
import resource
import selectors
import signal
import socket
import sys
import weakref
from typing import Any, NoReturn, cast

from ..snakemake_internals import cli as internal_cli
from ..worker.warm_protocol import (
    Exited,
    Inbox,
    Message,
    Op,
    Outbox,
    Pong,
    Received,
    Run,
    Stale,
    Started,
    Unsupported,
)
from ..worker.wire import Cold, Why
from . import child, member, snakemake_side
from .context import ZygoteContext
from .sources import Effect, Fingerprint, Recorder, module_sources
from .thread_pools import size_thread_pools


def thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def settle_threads() -> int:
    """Threads of this process after letting a throw-away fork run the at-fork handlers
    of native libraries (OpenBLAS ends its thread pool before a fork and starts it again
    only when used)."""
    if thread_count() > 1:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    return thread_count()


def _atexit_finalizers() -> set[int]:
    registry = getattr(weakref.finalize, "_registry", {})
    return {id(f) for f, info in list(registry.items()) if getattr(info, "atexit", False)}


class Server:
    def __init__(
        self,
        sock: socket.socket,
        first: Run,
        context: ZygoteContext,
        recorder: Recorder,
    ):
        self.sock = sock
        self.outbox = Outbox(sock)
        self.first = first
        self.context = context
        self.recorder = recorder
        self.fingerprint = Fingerprint(())
        self.children: dict[int, str] = {}
        self.retired = False
        #: Past its parse: it may have forked a job (a crash now is no refusal: its
        #: zygote reports its jobs lost, not cold, so none runs twice).
        self.serving = False

    # -- the parse ------------------------------------------------------------------------

    def prime(self) -> Cold | None:
        """Parse the workflow as the first job's command would; why it cannot go the warm
        way, or None."""
        env = {} if self.first.get("full_env") else dict(self.context.base_env)
        env.update(dict(self.first["env"]))
        os.environ.clear()
        os.environ.update(env)
        os.chdir(str(self.first["cwd"]))
        modules = set(sys.modules)
        finalizers = _atexit_finalizers()
        self.recorder.start()
        try:
            workflow = snakemake_side.prime(list(self.first["argv"]))
        except snakemake_side.NotWarmable as e:
            return Cold(e.why, e.detail)
        except (Exception, Effect) as e:
            if self.recorder.effects:
                return Cold(Why.PARSE_EFFECTS, str(self.recorder.effects[0]))
            return Cold(Why.PARSE_FAILED, f"{type(e).__name__}: {e}")
        finally:
            self.recorder.stop()
        snakemake_side.quiesce(workflow)
        if self.recorder.effects:
            return Cold(Why.PARSE_EFFECTS, str(self.recorder.effects[0]))
        if _atexit_finalizers() - finalizers:
            return Cold(Why.EXIT_HANDLERS, "e.g. a temporary directory, made anew by every job")
        return self._fingerprint(workflow, modules)

    def _fingerprint(self, workflow: Any, modules: set[str]) -> Cold | None:
        """After the parse: what it read (a job finds it changed: a new parse), the
        thread pools sized for the jobs, and the process left single-threaded."""
        skip = tuple(
            os.path.join(os.path.abspath(p), "") for p in internal_cli.source_cache_paths(workflow)
        )
        self.fingerprint = Fingerprint.of(
            self.recorder.reads,
            self.recorder.listed,
            module_sources(set(sys.modules) - modules, self.recorder.library_roots),
            skip,
        )
        pools = self.context.pools
        if not size_thread_pools(pools, os.environ):
            return Cold(
                Why.BLAS_UNSIZABLE,
                f"its jobs' numpy needs more than one thread; {pools.unsized[0]}, loaded with "
                "one, has no thread setter this plugin can use, or is an OpenMP runtime "
                "whose resize would change every job's",
            )
        threads = settle_threads()  # (the pools' threads, started by the resize, end here)
        if threads > 1:
            return Cold(Why.THREADS_LEFT, f"{threads - 1} thread(s)")
        gc.collect()
        gc.freeze()  # children then leave the parse's objects (and their pages) alone
        return None

    # -- serving --------------------------------------------------------------------------

    def serve(self) -> NoReturn:
        refused = self.prime()
        if refused is not None:
            self._send(Unsupported(op=Op.UNSUPPORTED, cold=refused.to_wire()))
            os._exit(0)
        self.serving = True
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        self._close = [self.sock.fileno(), wake_r, wake_w]
        selector = selectors.DefaultSelector()
        selector.register(self.sock, selectors.EVENT_READ, "zygote")
        selector.register(wake_r, selectors.EVENT_READ, "wake")
        inbox = Inbox()
        fds: list[int] = []
        if not self.first.get("prime"):  # (primed before its command's first job: none)
            self._run(self.first)
        while True:
            self._reap()
            if self.retired and not self.children:
                os._exit(0)
            for item, _ in selector.select():
                if item.data == "wake":
                    with contextlib.suppress(OSError):
                        while os.read(wake_r, 4096):
                            pass
                    continue
                try:
                    data, got, _, _ = socket.recv_fds(self.sock, 1 << 16, 64)
                except OSError:
                    data, got = b"", []
                fds += got
                if not data:  # the zygote is gone: so is the worker, or it soon will be
                    os._exit(0)
                for msg in inbox.feed(data):
                    wanted = int(msg.get("fds") or 0)
                    msg["_fds"], fds = fds[:wanted], fds[wanted:]
                    self._handle(msg)

    def _handle(self, msg: Received) -> None:
        op = msg.get("op")
        if op == Op.RUN:
            self._run(cast(Run, msg))
        elif op == Op.PING:  # the zygote asks whether this server still answers
            self._send(Pong(op=Op.PONG))
        elif op == Op.RETIRE:
            self.retired = True

    def _run(self, request: Run) -> None:
        key = str(request["key"])
        fds = list(request.get("_fds") or ())
        if self.retired:
            member.close_fds(fds)
            self._send(Stale(op=Op.STALE, key=key, path=None))
            return
        changed = self.fingerprint.changed()
        if changed is not None:
            member.close_fds(fds)
            self.retired = True
            self._send(Stale(op=Op.STALE, key=key, path=changed))
            return
        pid = child.fork_clean()
        if pid == 0:
            child.become_job(request, self._close, self.context)
        member.close_fds(fds)
        with contextlib.suppress(OSError):  # also here: a kill after "started" must reach it
            os.setpgid(pid, int(request.get("pgid") or pid))
        self.children[pid] = key
        self._send(Started(op=Op.STARTED, key=key, pid=pid))

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status, rusage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            key = self.children.pop(pid, None)
            if key is not None:
                code = os.waitstatus_to_exitcode(status)
                # What the job used (the kernel's figures for the child and what it waited
                # for), and this server's own peak, which the fork handed the child.
                floor = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                usage = (rusage.ru_utime + rusage.ru_stime, rusage.ru_maxrss, floor)
                self._send(Exited(op=Op.EXITED, key=key, status=code, usage=usage))

    def _send(self, msg: Message) -> None:
        try:
            self.outbox.send(msg)
        except OSError:  # the zygote is gone
            os._exit(0)


def run_server(
    sock: socket.socket,
    first: Run,
    context: ZygoteContext,
    recorder: Recorder,
) -> NoReturn:
    """The body of a freshly forked server process. A failure before it serves (nothing
    forked yet) is a refusal: its jobs go cold; after, it only ends (a job it forked
    before its ``Started`` went would otherwise run a second time, cold): its zygote
    reports them lost, and the worker ends their processes before any rerun."""
    server: Server | None = None
    try:
        server = Server(sock, first, context, recorder)
        server.serve()
    except BaseException as e:
        if server is None or not server.serving:
            with contextlib.suppress(Exception):
                failed = Cold(Why.SERVER_FAILED, f"{type(e).__name__}: {e}")
                Outbox(sock).send(Unsupported(op=Op.UNSUPPORTED, cold=failed.to_wire()))
    finally:
        os._exit(0)
