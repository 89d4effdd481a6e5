"""A job's own process, forked from a primed server: made to look like the process the
cold way starts (``python -m snakemake <argv>``), then Snakemake's ``main()``.

What a fresh interpreter would have and a fork does not, set here in this order: its own
process group (so that the worker's kill of the job's group reaches it and what it
starts), the job marker where ``/proc`` shows it (:mod:`.marker`), the signal
dispositions the zygote started with (none of the servers' handlers, no wakeup fd, no
blocked signals), only the file descriptors a started process has (the servers' sockets
closed; stdin from /dev/null, stdout and stderr into the job's log), the job's
environment and working directory, ``sys.argv``, fresh random state. At the end, what
interpreter exit does: wait for the job's non-daemon threads, run the exit handlers,
flush; then ``os._exit`` (never back into the server's code).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
import traceback
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from ..snakemake_internals.shell import remember_shell_kills
from ..worker.proctree import JOB_MARKER
from ..worker.warm_protocol import Run
from . import marker, member, snakemake_side
from .context import ZygoteContext

#: Exit status when the job's process could not even be set up (sysexits EX_SOFTWARE).
SETUP_FAILED = 70


def fork_clean() -> int:
    """``os.fork()`` once this process's standard streams are flushed: a child must not
    write again what its parent had buffered. The child's pid (0 in the child)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    return os.fork()


def record_signals() -> dict[int, Any]:
    """The signal dispositions of this process now (call first thing at start-up)."""
    found = {}
    for sig in signal.valid_signals():
        with contextlib.suppress(OSError, ValueError):
            handler = signal.getsignal(sig)
            if handler is not None:
                found[int(sig)] = handler
    return found


def restore_signals(dispositions: Mapping[int, Any]) -> None:
    signal.set_wakeup_fd(-1)
    for sig, handler in dispositions.items():
        with contextlib.suppress(OSError, ValueError, TypeError):
            signal.signal(sig, handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def _take_fds(fds: Sequence[int]) -> None:
    """A group member: the group process's stdin, stdout and stderr, as a spawned shell
    would inherit them."""
    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            with contextlib.suppress(OSError):
                os.close(fd)


def _redirect(log_path: str) -> None:
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _reseed() -> None:
    """Python's ``random`` reseeds itself after a fork; numpy's global state does not."""
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        with contextlib.suppress(Exception):
            numpy_random.seed()


#: Exit status of an interpreter whose final flush of stdout or stderr failed (CPython's
#: ``Py_Exit``/``Py_RunMain`` when ``Py_FinalizeEx`` fails), whatever the status was.
FLUSH_FAILED = 120


def flush_std_streams() -> bool:
    """Flush ``sys.stdout`` and ``sys.stderr`` as the interpreter does at exit (its
    ``flush_std_files``): False if either failed, the stdout error printed as
    "Exception ignored"."""
    ok = True
    for stream in (sys.stdout, sys.stderr):
        if stream is None or getattr(stream, "closed", False):
            continue
        try:
            stream.flush()
        except Exception as e:
            ok = False
            if stream is sys.stdout:
                with contextlib.suppress(Exception):
                    sys.stderr.write(f"Exception ignored in: {stream!r}\n")
                    # as CPython's PyErr_WriteUnraisable prints it: no Python frame
                    traceback.print_exception(type(e), e, None, file=sys.stderr)
    return ok


def interpreter_exit(code: int) -> int:
    """What the interpreter does at exit before it ends the process, for a job's process
    (this module's) and a warm script's (``script_run.end_as_the_interpreter``) alike: its
    non-daemon threads joined, exit handlers, the standard streams flushed; the exit
    status, :data:`FLUSH_FAILED` if a flush failed (as ``python`` exits then)."""
    with contextlib.suppress(Exception):
        threading._shutdown()  # type: ignore[attr-defined]  # joins non-daemon threads
    atexit._run_exitfuncs()
    return code if flush_std_streams() else FLUSH_FAILED


def become_fresh(
    key: str,
    pgid: int,
    dispositions: Mapping[int, Any],
    env: Mapping[str, str],
    cwd: str,
    fds: Sequence[int] | None = None,
    log: str | None = None,
    close: Sequence[int] = (),
    close_all: bool = False,
) -> None:
    """The first steps of every process forked for a job (a job's Snakemake here, a warm
    script's in :mod:`.script_run`): its marker written first (a sweep must find it from
    then on), its process group (``pgid``; 0: its own), the signal dispositions of a fresh
    process, ``close`` closed, its stdin, stdout and stderr (``fds``: a spawning process's,
    else ``log`` for both outputs and /dev/null), every other descriptor closed if
    ``close_all`` (as ``Popen(close_fds=True)``), ``env`` as its whole environment, ``cwd``,
    and random seeds of its own. Raises if the marker could not be written."""
    marked = marker.write(key)
    os.setpgid(0, pgid)
    restore_signals(dispositions)
    for fd in close:
        with contextlib.suppress(OSError):
            os.close(fd)
    if fds:
        _take_fds(fds)
    else:
        _redirect(str(log))
    if close_all:
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    os.environ.clear()
    os.environ.update(env)
    if not marked:
        raise RuntimeError(f"could not write the job marker {JOB_MARKER}={key}")
    os.chdir(cwd)
    _reseed()


def become_job(request: Run, close: Sequence[int], context: ZygoteContext) -> NoReturn:
    """Run one job in this (just forked) process; never returns.

    A group member (``pgid`` and file descriptors in the request, see :mod:`.member`)
    joins its group job's process group and takes its stdin, stdout and stderr and its
    whole environment."""
    code = SETUP_FAILED
    try:
        key = str(request.get("marker") or request["key"])
        env = {} if request.get("full_env") else dict(context.base_env)
        env.update(dict(request["env"]))
        env[JOB_MARKER] = key
        become_fresh(
            key, int(request.get("pgid") or 0), context.dispositions, env, str(request["cwd"]),
            fds=request.get("_fds"), log=str(request.get("log")), close=close,
        )  # fmt: skip
        if request.get("group"):
            remember_shell_kills()
            member.install(key, context.address)
        code = interpreter_exit(snakemake_side.run(list(request["argv"])))
    except BaseException:
        with contextlib.suppress(Exception):
            sys.stderr.write("dask-slurm warm path: the job's process failed to start:\n")
            traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)
