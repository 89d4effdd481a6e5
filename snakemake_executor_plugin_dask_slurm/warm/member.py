"""A group job's ``run:`` and ``shadow:`` members, spawned warm.

A group job's own Snakemake runs its members with Snakemake's local executor: ``shell:``,
``script:``, ``notebook:`` and ``wrapper:`` members in threads of its own process, but
``run:`` and ``shadow:`` members in a new process each (``Executor.spawn_job``:
``subprocess.check_call`` of ``cd <dir> && python -m snakemake ... --mode subprocess``),
a second cold start inside the first. In a group job's warm process this module replaces
``spawn_job``: the same command goes to the zygote (over a Unix socket only descendants
of the zygote know the name of, and only this user may use), which runs it like any warm
job: a process forked from a server that parsed the workflow for that command. The
member's process joins the group job's process group, carries its job marker, and gets
the group process's stdin, stdout and stderr (passed as file descriptors), its
environment and the ``cd`` directory, as the spawned shell would.

If the zygote says the member cannot go the warm way, or cannot be reached, the member is
spawned as before (:func:`request_for` and :func:`run_warm` say why, as a Cold); a reason
decided here (:data:`SAID_IN_THE_LOG`) is one line in the group job's log.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import sys
from typing import Any, cast

from ..snakemake_internals.local_executor import wrap_spawn_job
from ..worker.proctree import JOB_MARKER
from ..worker.warm_protocol import Exited, GoCold, Inbox, Op, Run, encode
from ..worker.wire import Cold, Why
from .command import Unsplittable, parse_job_command

_count = itertools.count(1)


def request_for(command: str, group_key: str) -> Run | Cold:
    """The zygote's request for a member's spawn command in the group job ``group_key``
    (its processes' marker), or why it cannot have one (spawn it as before)."""
    try:
        found = parse_job_command(command)
    except Unsplittable as e:
        return Cold(Why.MEMBER_COMMAND, str(e))
    if found.module != "snakemake":
        return Cold(Why.MEMBER_COMMAND, f"it runs {found.module or found.python}")
    if found.cd is None:
        return Cold(Why.MEMBER_COMMAND, "no `cd DIR &&` before it")
    env = {k: v for k, v in os.environ.items() if k != JOB_MARKER}
    env.update(dict(found.exports))
    return Run(
        op=Op.RUN,
        key=f"{group_key}/member{next(_count)}-{os.getpid()}",
        marker=group_key,
        argv=list(found.argv),
        env=sorted(env.items()),
        full_env=True,
        cwd=found.cd,
        python=found.python,
        pgid=os.getpgid(0),
        fds=3,
    )


def run_warm(request: Run, address: str) -> int | Cold:
    """Have the zygote (listening at ``address``) run the member; its exit status
    (negative: a signal), or why it went no warm way (then it never started)."""
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError as e:
        return Cold(Why.ZYGOTE_UNREACHABLE, f"{type(e).__name__}: {e}")
    with sock:  # closed on every way out: the zygote unreachable too
        try:
            sock.connect(address)
            socket.send_fds(sock, [encode(request)], [0, 1, 2])
        except OSError as e:
            return Cold(Why.ZYGOTE_UNREACHABLE, f"{type(e).__name__}: {e}")
        inbox = Inbox()
        started = False
        while True:
            try:
                data = sock.recv(1 << 16)
            except OSError:
                data = b""
            if not data:  # the zygote died: lost if it had started (the worker reruns all)
                return 1 if started else Cold(Why.WARM_GONE, "it closed the connection")
            for msg in inbox.feed(data):
                op = msg.get("op")
                if op == Op.STARTED:
                    started = True
                elif op == Op.COLD:
                    found = Cold.from_wire(cast(GoCold, msg).get("cold"))
                    return found or Cold(Why.SERVER_FAILED, "it did not say why")
                elif op == Op.EXITED:
                    status = cast(Exited, msg).get("status")
                    return int(status) if isinstance(status, int) else 1
                elif op == Op.LOST:
                    return 1


def install(group_key: str, address: str) -> bool:
    """In a group job's warm process (``group_key``: its task key): spawn ``run:`` and
    ``shadow:`` members warm, through the zygote listening at ``address``. False, and
    nothing changed, if Snakemake's local executor is not the one this was written for."""
    return wrap_spawn_job(lambda original: spawner(original, group_key, address))


#: The reasons a member spawned as a fresh Snakemake says in its group job's log: those
#: decided in the group job's process, which nothing else reports (docs/further.md).
SAID_IN_THE_LOG = frozenset({Why.MEMBER_COMMAND, Why.ZYGOTE_UNREACHABLE})


def spawner(original: Any, group_key: str, address: str) -> Any:
    """The local executor's ``spawn_job`` that runs a member warm, or as ``original``
    does (a fresh Snakemake)."""
    from ..snakemake_internals.local_executor import log_debug, spawned_job_error

    def spawn_job(self: Any, job: Any) -> None:
        cmd = self.format_job_exec(job)
        request = request_for(cmd, group_key)
        status = request if isinstance(request, Cold) else run_warm(request, address)
        if isinstance(status, Cold):  # spawned as before
            if status.why in SAID_IN_THE_LOG:
                say_fresh(job, status)
            return original(self, job)
        log_debug(f"spawned job: {cmd}")
        if status != 0:
            raise spawned_job_error()

    return spawn_job


def say_fresh(job: Any, cold: Cold) -> None:
    """One line in the group job's log (this process's stderr, where Snakemake's own
    lines go): the member ``job`` runs in a fresh Snakemake, and why."""
    name = getattr(getattr(job, "rule", None), "name", None) or "a member"
    with contextlib.suppress(Exception):  # (a closed stream: the member runs all the same)
        sys.stderr.write(f"dask-slurm: {name}: a fresh Snakemake: {cold}\n")
        sys.stderr.flush()


def close_fds(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
