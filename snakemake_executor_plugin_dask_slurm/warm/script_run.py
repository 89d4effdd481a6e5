"""A warm job's Python script in its own process, forked from the zygote: run as
``python FILE`` would run it (:func:`become_script`), and ended as that interpreter ends.
"""

from __future__ import annotations

import builtins
import contextlib
import gc
import io
import os
import signal
import sys
import types
from collections.abc import Sequence
from importlib.machinery import SourceFileLoader
from typing import Any, NoReturn

from ..worker.warm_protocol import RunScript
from .child import SETUP_FAILED, become_fresh, interpreter_exit
from .context import ZygoteContext
from .thread_pools import size_thread_pools


def _stream(fd: int, name: str, mode: str, template: Any, line_buffering: bool) -> io.TextIOWrapper:
    """A standard stream as the interpreter makes it at start-up (``template``: the
    zygote's, made by the same interpreter from the same environment: unbuffered with
    ``-u`` or ``PYTHONUNBUFFERED``)."""
    unbuffered = mode == "w" and isinstance(getattr(template, "buffer", None), io.FileIO)
    binary: Any = open(fd, mode + "b", buffering=0 if unbuffered else -1, closefd=False)  # noqa: SIM115
    raw = binary if unbuffered else binary.raw
    raw.name = name
    text = io.TextIOWrapper(
        binary,
        encoding=getattr(template, "encoding", None),
        errors=getattr(template, "errors", None),
        newline="\n",
        line_buffering=line_buffering and not unbuffered,
        write_through=unbuffered,
    )
    text.mode = mode  # type: ignore[misc]
    return text


def fresh_stdio() -> None:
    """New standard streams on file descriptors 0-2, as a fresh interpreter has."""
    stdin = _stream(0, "<stdin>", "r", sys.__stdin__, False)
    stdout = _stream(1, "<stdout>", "w", sys.__stdout__, os.isatty(1))
    stderr = _stream(2, "<stderr>", "w", sys.__stderr__, True)
    sys.stdin, sys.stdout, sys.stderr = stdin, stdout, stderr
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = stdin, stdout, stderr  # type: ignore[misc]


def _exit_code(e: SystemExit) -> int:
    """What the interpreter exits with for an uncaught ``SystemExit`` (it prints a code
    that is not an integer or None)."""
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    with contextlib.suppress(Exception):
        sys.stderr.write(f"{code}\n")
    return 1


def run_file(
    path: str, initial_path: Sequence[str], appended_path: Sequence[str] = ()
) -> tuple[int, bool]:
    """Run ``path`` as ``python path`` runs it, in a fresh ``__main__`` (``sys.path``: its
    own directory, ``initial_path`` after the first entry, then ``appended_path``, what
    importing Snakemake appends); the exit status and whether it ended by an uncaught
    KeyboardInterrupt."""
    sys.argv = [path]
    sys.orig_argv = [sys.executable, path]
    own = [os.path.dirname(os.path.realpath(path)), *initial_path[1:]]
    sys.path[:] = own + [entry for entry in appended_path if entry not in own]
    main = types.ModuleType("__main__")
    main.__dict__.update(
        __file__=path,
        __cached__=None,
        __loader__=SourceFileLoader("__main__", path),
        __builtins__=builtins,
        __annotations__={},
    )
    sys.modules["__main__"] = main
    try:
        with io.open_code(path) as f:
            source = f.read()
        code = compile(source, path, "exec", dont_inherit=True)
        exec(code, main.__dict__)
    except SystemExit as e:
        return _exit_code(e), False
    except BaseException as e:
        tb = e.__traceback__.tb_next if e.__traceback__ is not None else None
        e.__traceback__ = tb  # without this function's frame, as the interpreter prints it
        sys.excepthook(type(e), e, tb)
        return 1, isinstance(e, KeyboardInterrupt)
    return 0, False


def clear_globals(namespace: dict[str, Any]) -> None:
    """A module's globals as the interpreter clears them at exit (``_PyModule_ClearDict``):
    the names with one leading underscore set to None, then every other but
    ``__builtins__``. Each object goes when its last reference does, so a file the
    script left open is closed by its text layer first, which flushes it (collected as
    garbage instead, its layers may be finalized in any order and its text lost)."""
    for key in [k for k in namespace if k[:1] == "_" and k[1:2] != "_"]:
        namespace[key] = None
    for key in [k for k in namespace if k != "__builtins__"]:
        namespace[key] = None


def end_as_the_interpreter(code: int, before: Sequence[str]) -> int:
    """What ``python FILE`` does after the file ran (``Py_FinalizeEx``), for what the
    script made; the exit status. Its non-daemon threads joined, exit handlers, the
    standard streams flushed (a failure makes the status 120); then the globals of its
    ``__main__`` cleared, which closes and flushes the files it left open while the
    modules their ``close`` needs are whole (gzip's, say), then those of the modules it
    imported (not in ``before``), newest first; a collection; and the streams it
    replaced flushed."""
    code = interpreter_exit(code)
    known = set(before) - {"__main__"}
    imported = [name for name in sys.modules if name not in known and name != "__main__"]
    for name in ["__main__", *reversed(imported)]:
        module = sys.modules.get(name)
        if isinstance(module, types.ModuleType) and name not in sys.builtin_module_names:
            with contextlib.suppress(Exception):
                clear_globals(module.__dict__)
    with contextlib.suppress(Exception):
        gc.collect()
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):
            if stream is not None:
                stream.flush()
    return code


def fresh_process_state(cwd: str) -> None:
    """Per-process state a fresh interpreter makes anew, which a fork inherits from the
    zygote: the garbage collector's view (the zygote's objects frozen, so a collection
    walks and copies only the script's own), multiprocessing's authentication key and the
    directory it records at import."""
    gc.freeze()
    process = sys.modules.get("multiprocessing.process")
    if process is not None:
        with contextlib.suppress(Exception):
            process.current_process().authkey = os.urandom(32)
            setattr(process, "ORIGINAL_DIR", os.path.abspath(cwd))  # noqa: B010


def become_script(request: RunScript, fds: Sequence[int], context: ZygoteContext) -> NoReturn:
    """Run the request's script in this (just forked) process; never returns."""
    try:
        become_fresh(
            str(request["marker"]), int(request["pgid"]), context.dispositions,
            dict(request["env"]), str(request["cwd"]), fds=fds,
            close_all=True,  # what Popen(close_fds=True) leaves
        )  # fmt: skip
        fresh_process_state(str(request["cwd"]))
        size_thread_pools(context.pools, os.environ)
        fresh_stdio()
        before = list(sys.modules)
    except BaseException:
        with contextlib.suppress(Exception):
            sys.stderr.write("dask-slurm warm path: the script's process failed to start:\n")
            import traceback

            traceback.print_exc()
            sys.stderr.flush()
        os._exit(SETUP_FAILED)
    scripts = context.scripts
    code, interrupted = run_file(str(request["file"]), context.initial_path, scripts.appended_path)
    code = end_as_the_interpreter(code, before)
    if interrupted:  # as the interpreter does: end by the signal itself
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code & 0xFF)  # exit(code) of C: what the parent's wait sees
