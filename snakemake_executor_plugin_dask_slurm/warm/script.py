"""A warm job's Python ``script:``, run in a process forked from the zygote.

Snakemake runs a Python script as ``shell("{python} {script}")``: ``bash -c "set -euo
pipefail; python .snakemake/scripts/tmp….py"``, a fresh interpreter whose preamble
imports ``snakemake.script`` and most of Snakemake again (~160 ms of CPU per job). The
job's own process cannot fork it (it is multi-threaded then); the zygote can (it is
single-threaded and has imported all of that), so in a warm job's process
:func:`install` has the script's process forked by the zygote, as :mod:`.member` has a
group's ``run:`` members: over the zygote's abstract socket, with the job's stdin, stdout
and stderr passed as file descriptors; the process joins the job's process group and
carries its marker (cancel, landing, the sweep and "at most one copy" hold unchanged).

What runs is decided by Snakemake's own code: ``PythonScript.execute_script`` (pinned by
``snakemake_internals.script.SCRIPT_HOOK``) builds the command and ``shell()`` its
environment and error; only its last step, ``subprocess.Popen``, is replaced, and only
when it would start exactly
``<default bash> -c "set -euo pipefail; <this interpreter> <the script>"``
(:func:`why_popen_not_warm`) for a script with no ``conda:``, ``container:``,
``envmodules:`` or ``benchmark:`` (:func:`why_script_not_warm`). The environment is
``shell()``'s with what bash changes before it execs the interpreter (:func:`bash_env`).
Anything else, or a zygote that cannot take it, starts the command as before.

The forked process then runs the file as ``python FILE`` would (:func:`become_script`).
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import gc
import io
import itertools
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import traceback
import types
from collections.abc import Mapping, Sequence
from importlib.machinery import SourceFileLoader
from typing import Any, NoReturn

from ..snakemake_internals import shell as internal_shell
from ..snakemake_internals.deployment import script_bench_record
from ..snakemake_internals.script import SCRIPT_HOOK, software_reason, wrap_execute_script
from ..worker.proctree import JOB_MARKER
from ..worker.warm_protocol import Inbox, encode
from . import marker, member
from .child import SETUP_FAILED, _reseed, _take_fds, restore_signals

#: The prefix ``shell()`` puts before a command when bash is its executable and the
#: workflow set no ``shell.prefix``.
DEFAULT_PREFIX = "set -euo pipefail; "

#: Variables that change what bash does at start-up (options, startup files, functions):
#: with any of them set, the script goes through the shell.
BASH_VARIABLES = (
    "SHELLOPTS",
    "BASHOPTS",
    "BASH_ENV",
    "ENV",
    "POSIXLY_CORRECT",
    "BASH_XTRACEFD",
    "BASH_COMPAT",
    "IFS",
    "PS4",
    "CDPATH",
    "GLOBIGNORE",
)
#: Variables that change how the interpreter starts (its path, flags, encodings): a
#: forked process has the zygote's start, so they must be the zygote's.
INTERPRETER_VARIABLES = ("LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE")
INTERPRETER_PREFIX = "PYTHON"

#: Set in the zygote (:func:`install`): the interpreter's path as it started and the
#: bash ``shell()`` uses by default.
INITIAL_PATH: list[str] = []
DEFAULT_BASH: str | None = None

#: OpenBLAS (numpy's, which Snakemake imports through yte) sizes its thread pool when it
#: loads, from the environment: a fresh interpreter's from the job's (``threads``, which
#: Snakemake's shell exports), the zygote's from its own. Its setter and getter, by build.
OPENBLAS_SYMBOLS = (
    ("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
    ("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
    ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
    ("openblas_set_num_threads", "openblas_get_num_threads"),
)
#: Other runtimes that size a pool when they load (OpenMP, MKL, BLIS, TBB): with any of
#: them loaded in the zygote, scripts go through the shell (no way to resize each here).
OTHER_POOLS = ("libgomp", "libiomp", "libomp", "libmkl", "libblis", "libtbb")
#: Set in the zygote (:func:`install`): how to size its OpenBLAS pools in a script's
#: process, or why scripts cannot run in it.
BLAS_SETTERS: list[Any] = []
POOLS_REASON: list[str] = []
#: Set in the zygote (:func:`install`): what ``import snakemake`` appends to ``sys.path``
#: (its pip deployments), which a fresh script's preamble does when it imports Snakemake.
APPENDED_PATH: list[str] = []
#: Exit status of an interpreter whose final flush of stdout or stderr failed.
FLUSH_FAILED = 120

_local = threading.local()
_count = itertools.count(1)


# -- the decision (pure) ---------------------------------------------------------------------


def why_script_not_warm(software: str | None, bench_record: Any, edit: bool) -> str | None:
    """Why this Python script must go through ``shell()``, or None; ``software``: why its
    software deployment keeps it there (``snakemake_internals.script.software_reason``)."""
    if software is not None:
        return software
    if bench_record is not None:
        return "it is benchmarked (the record measures the shell's process tree)"
    if edit:
        return "it is edited interactively"
    return None


def expected_command(python: str, fname: str) -> str:
    """The command ``shell()`` runs for ``PythonScript.execute_script`` with Snakemake's
    default prefix and suffix (``"{py_exec} {fname:q}"``)."""
    return " ".join((DEFAULT_PREFIX, f"{python} {shlex.quote(fname)}", "")).strip()


def why_popen_not_warm(
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    python: str,
    fname: str,
    bash: str | None,
    stdout: Any,
) -> str | None:
    """Why this ``Popen`` call of ``shell()`` is not exactly the default one for the
    script, or None."""
    cmd = args[0] if args else kwargs.get("args")
    if len(args) > 1:
        return "unexpected arguments"
    if cmd != expected_command(python, fname):
        return "the command is not Snakemake's default one (shell prefix, suffix or wrapper)"
    wanted = {"bufsize", "shell", "stdout", "universal_newlines", "close_fds", "executable", "env"}
    if set(kwargs) - {"args"} != wanted:
        return "unexpected arguments"
    if bash is None or kwargs["executable"] != bash:
        return "the shell is not Snakemake's default bash"
    if kwargs["shell"] is not True or kwargs["close_fds"] is not True:
        return "not a shell command with closed descriptors"
    if kwargs["universal_newlines"] is not None or kwargs["bufsize"] != -1:
        return "its output is read"
    if kwargs["stdout"] is not stdout:
        return "its output is redirected"
    if not isinstance(kwargs["env"], dict):
        return "no environment"
    return None


def _bash_level(value: str | None) -> str | None:
    """``SHLVL`` as bash leaves it when it execs the last command of ``-c`` (it adds one at
    start and takes it off at the exec); None when bash's rules are not this simple."""
    if value is None or value == "":
        return "0"
    if not value.isascii() or not value.isdigit() or int(value) >= 999:
        return None
    return str(int(value))


def bash_env(env: Mapping[str, str], cwd: str, program: str) -> dict[str, str] | str:
    """The environment ``bash -c "set -euo pipefail; PROGRAM FILE"`` (Snakemake's shell,
    bash 4-5 started as ``/bin/sh``) gives ``PROGRAM`` when started with ``env`` in
    ``cwd``: ``SHLVL``, ``_`` and ``PWD`` as bash sets them. A string (why not) where
    bash would do more than that."""
    for name in env:
        if name in BASH_VARIABLES or name.startswith("BASH_FUNC_"):
            return f"the environment sets {name}, which bash reads at start-up"
        if not name.isidentifier() or not name.isascii():
            return f"the environment has {name!r}, a name bash may not pass on"
    if "PATH" not in env:
        return "the environment has no PATH (bash would set its own)"
    if not os.path.isabs(program):
        return "the interpreter's path is not absolute"
    level = _bash_level(env.get("SHLVL"))
    if level is None:
        return f"SHLVL={env.get('SHLVL')!r}"
    found = dict(env)
    found["SHLVL"] = level
    found["_"] = program
    pwd = env.get("PWD")
    if pwd is not None and pwd.startswith("/") and _same_dir(pwd, cwd):
        if os.path.normpath(pwd) != pwd or pwd.startswith("//"):
            return f"PWD={pwd!r} is not in bash's canonical form"
    else:
        found["PWD"] = cwd
    return found


def _same_dir(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def loaded_libraries(maps: str) -> list[str]:
    """The shared libraries a ``/proc/<pid>/maps`` text names, each once, in order."""
    found: dict[str, None] = {}
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].startswith("/") and ".so" in fields[5]:
            found.setdefault(fields[5], None)
    return list(found)


def thread_pool_libraries(paths: Sequence[str]) -> tuple[list[str], str | None]:
    """Of the loaded libraries: the OpenBLAS ones (sized again in each script's process),
    and why scripts cannot run in this process (another runtime that sizes a pool when it
    loads), or None."""
    openblas, other = [], []
    for path in paths:
        name = os.path.basename(path).lower()
        if "openblas" in name:
            openblas.append(path)
        elif name.startswith(OTHER_POOLS):
            other.append(os.path.basename(path))
    if other:
        return openblas, (
            f"the warm process has loaded {', '.join(other)}, whose threads were sized from "
            "its own environment, not the job's"
        )
    return openblas, None


def openblas_threads(env: Mapping[str, str], cpus: int) -> int:
    """The size OpenBLAS gives its pool when it loads in ``env`` with ``cpus`` usable CPUs
    (its ``blas_get_cpu_number``: OPENBLAS_NUM_THREADS, else GOTO_NUM_THREADS, else
    OMP_NUM_THREADS, the first that is a positive number; else every CPU; at most
    ``cpus``). Its compile-time ceiling is applied by its own setter."""
    wanted = 0
    for name in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"):
        value = _leading_int(env.get(name, ""))
        if value > 0:
            wanted = value
            break
    return min(wanted, cpus) if wanted > 0 else cpus


def _leading_int(text: str) -> int:
    """``atoi``: the number at the start of ``text`` (0 if none)."""
    text = text.lstrip()
    digits = ""
    for ch in text:
        if not ch.isdigit():
            break
        digits += ch
    return int(digits) if digits else 0


def find_blas_setters() -> tuple[list[Any], str | None]:
    """In the zygote, once: the setters of the loaded OpenBLAS pools, or why scripts
    cannot run in it."""
    import ctypes

    try:
        with open("/proc/self/maps") as f:
            paths = loaded_libraries(f.read())
    except OSError as e:
        return [], f"its loaded libraries could not be read ({e})"
    openblas, reason = thread_pool_libraries(paths)
    if reason is not None:
        return [], reason
    setters = []
    for path in openblas:
        try:
            library = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        except OSError:
            continue
        for setter, getter in OPENBLAS_SYMBOLS:
            if hasattr(library, setter) and hasattr(library, getter):
                setters.append(getattr(library, setter))
                break
        else:
            name = os.path.basename(path)
            return [], f"its {name} has no thread setter this plugin knows"
    return setters, None


def size_thread_pools(setters: Sequence[Any], env: Mapping[str, str]) -> None:
    """In a script's process: the OpenBLAS pools as a fresh interpreter would size them
    from the job's environment."""
    threads = openblas_threads(env, len(os.sched_getaffinity(0)))
    for setter in setters:
        setter(threads)


def why_zygote_cannot(
    request: Mapping[str, Any],
    base_env: Mapping[str, str],
    initial_path: Sequence[str],
    pools_reason: str | None = None,
) -> str | None:
    """In the zygote: why it cannot be this script's interpreter, or None."""
    if pools_reason is not None:
        return pools_reason
    env = dict(request["env"])
    names = {n for n in (*env, *base_env) if n.startswith(INTERPRETER_PREFIX)}
    for name in sorted(names | set(INTERPRETER_VARIABLES)):
        if env.get(name) != base_env.get(name):
            return f"its {name} is not the warm process's (the interpreter's start depends on it)"
    if env.get(JOB_MARKER) != request.get("marker"):
        return f"its {JOB_MARKER} is not its job's"
    if not marker.fits(str(request.get("marker"))):
        return "its job's marker does not fit"
    if not initial_path:
        return "the warm process did not record its interpreter's path"
    return None


# -- in the job's process ----------------------------------------------------------------


class WarmScript:
    """What ``shell()`` uses of the ``Popen`` it started: the script's process, run by
    the zygote."""

    stdout = None
    stdin = None
    stderr = None

    def __init__(
        self,
        sock: socket.socket,
        inbox: Inbox,
        pid: int,
        args: Any,
        pending: Sequence[Mapping[str, Any]],
    ):
        self._sock = sock
        self._inbox = inbox
        #: What came with "started" (a quick script's exit).
        self._pending: list[Mapping[str, Any]] = list(pending)
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        while self.returncode is None:
            msgs, self._pending = self._pending, []
            if not msgs:
                try:
                    data = self._sock.recv(1 << 16)
                except OSError:
                    data = b""
                if not data:  # the zygote died: the worker reruns the job (lost)
                    self.returncode = 1
                    break
                msgs = list(self._inbox.feed(data))
            for msg in msgs:
                if msg.get("op") in ("exited", "lost") and self.returncode is None:
                    status = msg.get("status")
                    self.returncode = int(status) if isinstance(status, int) else 1
        with contextlib.suppress(OSError):
            self._sock.close()
        return self.returncode

    def poll(self) -> int | None:
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None and self.pid > 0:
            with contextlib.suppress(OSError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


def start(fname: str, args: Sequence[Any], kwargs: dict[str, Any], stdout: Any) -> Any:
    """``shell()``'s ``Popen`` of the script: forked by the zygote when it is exactly the
    default command (a :class:`WarmScript`), else the real ``Popen``."""
    real = subprocess.Popen
    reason = why_popen_not_warm(
        args, kwargs, python=sys.executable, fname=fname, bash=DEFAULT_BASH, stdout=stdout
    )
    key = os.environ.get(JOB_MARKER)
    if reason is not None or key is None or member.ADDRESS is None:
        return real(*args, **kwargs)
    cwd = os.getcwd()
    env = bash_env(kwargs["env"], cwd, sys.executable)
    if isinstance(env, str):
        return real(*args, **kwargs)
    request = {
        "op": "script",
        "key": f"{key}/script{next(_count)}-{os.getpid()}",
        "marker": key,
        "file": fname,
        "env": sorted(env.items()),
        "cwd": cwd,
        "pgid": os.getpgid(0),
        "fds": 3,
    }
    out = stdout.fileno() if stdout is not None else 1
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(member.ADDRESS)
        socket.send_fds(sock, [encode(request)], [0, out, 2])
    except OSError:  # nothing reached the zygote
        sock.close()
        return real(*args, **kwargs)
    inbox = Inbox()
    while True:
        try:
            data = sock.recv(1 << 16)
        except OSError:
            data = b""
        # The zygote died: the script may have been forked a moment before, so it is not
        # started again here; the worker reruns the whole job the cold way (lost).
        msgs = inbox.feed(data) if data else [{"op": "started"}, {"op": "lost"}]
        for at, msg in enumerate(msgs):
            if msg.get("op") == "started":
                pid = int(msg.get("pid") or 0)
                return WarmScript(sock, inbox, pid, args[0] if args else "", msgs[at + 1 :])
            if msg.get("op") == "cold":
                sock.close()
                return real(*args, **kwargs)


class _Subprocess:
    """``snakemake.shell``'s ``sp``: the ``subprocess`` module, but ``Popen`` of an armed
    script (this thread's) goes to :func:`start`."""

    def __init__(self, real: Any, stdout: Any):
        self._real = real
        self._stdout = stdout

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def Popen(self, *args: Any, **kwargs: Any) -> Any:
        fname = getattr(_local, "fname", None)
        if fname is None:
            return self._real.Popen(*args, **kwargs)
        _local.fname = None  # the script's one command only
        return start(fname, args, kwargs, self._stdout)


def install() -> bool:
    """In the zygote: run warm jobs' Python scripts in forks of it. False, and nothing
    changed, on a Snakemake whose code is not the one this was written for."""
    global DEFAULT_BASH
    shell_module = internal_shell.module()
    if not SCRIPT_HOOK.matches() or isinstance(shell_module.sp, _Subprocess):
        return False
    DEFAULT_BASH = shell_module.shell.get_executable()
    import snakemake

    APPENDED_PATH[:] = [p for p in [getattr(snakemake, "PIP_DEPLOYMENTS_PATH", None)] if p]
    setters, reason = find_blas_setters()
    BLAS_SETTERS[:] = setters
    POOLS_REASON[:] = [reason] if reason is not None else []
    wrap_execute_script(_hook)
    internal_shell.swap_subprocess(lambda real, stdout: _Subprocess(subprocess, stdout))
    return True


def _hook(original: Any) -> Any:
    """``PythonScript.execute_script`` that arms this thread's ``Popen`` for its script."""

    def execute_script(self: Any, fname: str, edit: bool = False) -> None:
        reason = why_script_not_warm(software_reason(self), script_bench_record(self), edit)
        if reason is not None:
            return original(self, fname, edit)
        _local.fname = fname
        try:
            return original(self, fname, edit)
        finally:
            _local.fname = None

    return execute_script


# -- the script's process (forked from the zygote) -------------------------------------


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


def run_file(path: str, initial_path: Sequence[str]) -> tuple[int, bool]:
    """Run ``path`` as ``python path`` runs it, in a fresh ``__main__``; the exit status
    and whether it ended by an uncaught KeyboardInterrupt."""
    sys.argv = [path]
    sys.orig_argv = [sys.executable, path]
    own = [os.path.dirname(os.path.realpath(path)), *initial_path[1:]]
    sys.path[:] = own + [entry for entry in APPENDED_PATH if entry not in own]
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
                    traceback.print_exception(e, file=sys.stderr)
    return ok


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
    with contextlib.suppress(Exception):
        threading._shutdown()  # type: ignore[attr-defined]  # joins non-daemon threads
    atexit._run_exitfuncs()
    if not flush_std_streams():
        code = FLUSH_FAILED
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


def become_script(
    request: Mapping[str, Any],
    fds: Sequence[int],
    dispositions: Mapping[int, Any],
    initial_path: Sequence[str],
) -> NoReturn:
    """Run the request's script in this (just forked) process; never returns."""
    try:
        key = str(request["marker"])
        marked = marker.write(key)  # first: a sweep must find this process from now on
        os.setpgid(0, int(request["pgid"]))
        restore_signals(dispositions)
        _take_fds(fds)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # what Popen(close_fds=True) leaves
        os.environ.clear()
        os.environ.update(dict(request["env"]))
        if not marked:
            raise RuntimeError(f"could not write the job marker {JOB_MARKER}={key}")
        os.chdir(str(request["cwd"]))
        _reseed()
        fresh_process_state(str(request["cwd"]))
        size_thread_pools(BLAS_SETTERS, os.environ)
        fresh_stdio()
        before = list(sys.modules)
    except BaseException:
        with contextlib.suppress(Exception):
            sys.stderr.write("dask-slurm warm path: the script's process failed to start:\n")
            import traceback

            traceback.print_exc()
            sys.stderr.flush()
        os._exit(SETUP_FAILED)
    code, interrupted = run_file(str(request["file"]), initial_path)
    code = end_as_the_interpreter(code, before)
    if interrupted:  # as the interpreter does: end by the signal itself
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code & 0xFF)  # exit(code) of C: what the parent's wait sees
