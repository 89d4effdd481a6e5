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

The forked process then runs the file as ``python FILE`` would
(:func:`.script_run.become_script`); the thread pools it sizes are :mod:`.thread_pools`'s.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any, cast

from ..snakemake_internals import shell as internal_shell
from ..snakemake_internals.deployment import script_bench_record
from ..snakemake_internals.script import (
    SCRIPT_HOOK,
    pip_deployments_path,
    software_reason,
    wrap_execute_script,
)
from ..worker.proctree import JOB_MARKER
from ..worker.warm_protocol import Inbox, Op, Received, RunScript, Started, encode
from . import marker
from .context import ScriptSetup

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


def why_zygote_cannot(
    request: RunScript,
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
        pending: Sequence[Received],
    ):
        self._sock = sock
        self._inbox = inbox
        #: What came with "started" (a quick script's exit).
        self._pending: list[Received] = list(pending)
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
                if msg.get("op") in (Op.EXITED, Op.LOST) and self.returncode is None:
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


def start(
    fname: str,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    stdout: Any,
    address: str,
    bash: str | None,
) -> Any:
    """``shell()``'s ``Popen`` of the script: forked by the zygote (listening at
    ``address``) when it is exactly the default command with ``bash`` (a
    :class:`WarmScript`), else the real ``Popen``."""
    real = subprocess.Popen
    reason = why_popen_not_warm(
        args, kwargs, python=sys.executable, fname=fname, bash=bash, stdout=stdout
    )
    key = os.environ.get(JOB_MARKER)
    if reason is not None or key is None:
        return real(*args, **kwargs)
    cwd = os.getcwd()
    env = bash_env(kwargs["env"], cwd, sys.executable)
    if isinstance(env, str):
        return real(*args, **kwargs)
    request = RunScript(
        op=Op.SCRIPT,
        key=f"{key}/script{next(_count)}-{os.getpid()}",
        marker=key,
        file=fname,
        env=sorted(env.items()),
        cwd=cwd,
        pgid=os.getpgid(0),
        fds=3,
    )
    out = stdout.fileno() if stdout is not None else 1
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(address)
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
        msgs = inbox.feed(data) if data else [{"op": Op.STARTED}, {"op": Op.LOST}]
        for at, msg in enumerate(msgs):
            if msg.get("op") == Op.STARTED:
                pid = int(cast(Started, msg).get("pid") or 0)
                return WarmScript(sock, inbox, pid, args[0] if args else "", msgs[at + 1 :])
            if msg.get("op") == Op.COLD:
                sock.close()
                return real(*args, **kwargs)


class _Subprocess:
    """``snakemake.shell``'s ``sp``: the ``subprocess`` module, but ``Popen`` of an armed
    script (this thread's) goes to :func:`start`, to the zygote at ``address``."""

    def __init__(self, real: Any, stdout: Any, address: str, bash: str | None):
        self._real = real
        self._stdout = stdout
        self._address = address
        self._bash = bash

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def Popen(self, *args: Any, **kwargs: Any) -> Any:
        fname = getattr(_local, "fname", None)
        if fname is None:
            return self._real.Popen(*args, **kwargs)
        _local.fname = None  # the script's one command only
        return start(fname, args, kwargs, self._stdout, self._address, self._bash)


def install(address: str) -> ScriptSetup:
    """In the zygote (listening at ``address``): run warm jobs' Python scripts in forks of
    it; what their processes need of the zygote. Empty, and nothing changed, on a
    Snakemake whose code is not the one this was written for."""
    if not SCRIPT_HOOK.matches() or isinstance(internal_shell.subprocess_module(), _Subprocess):
        return ScriptSetup()
    bash = internal_shell.executable()
    appended = tuple(p for p in [pip_deployments_path()] if p)
    wrap_execute_script(_hook)
    internal_shell.swap_subprocess(
        lambda real, stdout: _Subprocess(subprocess, stdout, address, bash)
    )
    return ScriptSetup(bash, appended)


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
