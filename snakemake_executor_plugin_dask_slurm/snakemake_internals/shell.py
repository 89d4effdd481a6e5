"""Snakemake's ``shell()`` (snakemake/shell.py): what the plugin reads of it and changes.

**The wrapper** (:func:`wrapper`): the executable, prefix and suffix ``shell()`` puts
around a command, as the Snakefile set them (``shell.executable()``, ``shell.prefix()``,
``shell.suffix()``), read from its private ``_get_process_prefix`` and
``_process_suffix``: the direct way runs a command exactly as ``shell()`` would.

**A ``shell:`` rule's command** (:func:`rule_code`, :func:`shell_command`): what the
direct way reads of a rule's compiled function (its globals, bytecode and arguments) to
decide whether its command is a literal call of ``shell()`` (dispatch/direct_command.py
decides), and the job's command formatted as ``shell()`` formats it (the job's plain
file lists, ``Namedlist._plainstrings``, and the rule module's globals); guarded by
:data:`SHELL_RULE` (:func:`shell_rule_readable`).

**Its subprocess** (:func:`swap_subprocess`): the module ``shell()`` starts its process
with (``sp``), swapped in a warm process for one that sends a warm script to the zygote
(warm/script.py).

**Kills remembered** (:func:`remember_kills`), for a group job's own Snakemake. A group's
own Snakemake (``--mode remote``, on a worker) runs the jobs of a pipe or service group at
once (``snakemake/executors/local.py``, ``run_group_job``). When one
fails, it kills the others with ``shell.kill(jobid)``, which only reaches jobs whose shell
has already started. A pipe's consumer that starts a moment later (after a producer that
failed at once, e.g. with a shell syntax error) opens the pipe, whose writer will never
come, and blocks for ever; Snakemake then waits for it at shutdown, the group's task never
ends, and the workflow hangs (issue 16). Here a kill is remembered: a job whose shell
starts after its kill is killed as it starts.

Snakemake 9.27: ``shell._processes`` (job id -> the running shell's ``Popen``) and
``shell._lock`` are its internals; it registers a shell and kills one under that lock.
Used by the cold way (dispatch/group_runner.py) and the warm way (warm/child.py), both
through :func:`remember_shell_kills`.
"""

from __future__ import annotations

import dis
import functools
import importlib
import string
from collections import ChainMap
from dataclasses import dataclass
from typing import Any

from .guard import Touch, present


class Processes(dict[Any, Any]):
    """``shell._processes``: a shell registered for a job killed before is killed at once."""

    def __init__(self) -> None:
        super().__init__()
        self.killed: set[Any] = set()

    def __setitem__(self, jobid: Any, proc: Any) -> None:
        super().__setitem__(jobid, proc)
        if jobid in self.killed:
            proc.kill()

    def kill(self, jobid: Any) -> None:
        """Kill the job's shell, now or when it starts (call with ``shell._lock`` held)."""
        self.killed.add(jobid)
        proc = self.pop(jobid, None)
        if proc is not None:
            proc.kill()


def remember_kills(shell: Any) -> bool:
    """Make ``shell.kill`` remember its kills. False, and nothing changed, if Snakemake's
    internals are not the ones this was written for: the job then runs as before."""
    if not isinstance(getattr(shell, "_processes", None), dict) or not hasattr(shell, "_lock"):
        return False
    processes = Processes()
    processes.update(shell._processes)
    shell._processes = processes

    def kill(cls: Any, jobid: Any) -> None:
        with cls._lock:
            processes.kill(jobid)

    shell.kill = classmethod(kill)
    return True


def log_info(message: str) -> None:
    """``message`` on Snakemake's logger at info level: a line ``shell()`` would write
    (the direct way's "Activating environment modules")."""
    from snakemake.logging import logger

    logger.info(message)


def remember_shell_kills() -> bool:
    """:func:`remember_kills` on Snakemake's own ``shell`` (a group job's own Snakemake)."""
    from snakemake.shell import shell

    return remember_kills(shell)


def wrapper() -> tuple[str, str, str]:
    """(shell, prefix, suffix) that Snakemake's ``shell()`` uses, as the Snakefile set them.

    Read after the Snakefile was parsed (``shell.executable()``, ``shell.prefix()`` and
    ``shell.suffix()`` are set there).
    """
    from snakemake.shell import shell

    executable = shell.get_executable() or "/bin/sh"
    return executable, shell._get_process_prefix(executable), shell._process_suffix


#: The local names a ``shell:`` rule's compiled function passes to ``shell()``: Snakemake
#: 9's ``shell(CMD, bench_record=bench_record, bench_iteration=bench_iteration)``, Snakemake
#: 10's ``shell(CMD, run_args=run_args)`` (snakemake/parser.py, class Shell).
SHELL_CALL_LOCALS = frozenset({"bench_record", "bench_iteration", "run_args"})


# A shell: rule compiles (snakemake/parser.py, class Shell/Run) to
#     @workflow.shellcmd(CMD)
#     @workflow.run
#     def __rule_NAME(input, output, params, wildcards, threads, resources, log, rule, ...):
#         shell(CMD, bench_record=bench_record, bench_iteration=bench_iteration)
# (Snakemake 10: ``shell(CMD, run_args=run_args)``, :data:`SHELL_CALL_LOCALS`) and shell()
# formats CMD with snakemake.utils.format(stepout=2): the globals of that function (the
# namespace the rule was defined in: the module's for a module rule, also when `use rule
# ... with:` renames it), then its arguments (what the local executor's run_wrapper
# passes, snakemake/executors/local.py:111-172 and :287), then bench_record and
# bench_iteration. Job.shellcmd (jobs.py:616, format_wildcards :980) uses the main
# Snakefile's globals and a different set of names instead.

#: The rule function's arguments :func:`shell_command` fills in exactly as the local
#: executor does.
RUN_WRAPPER_LOCALS = frozenset(
    {
        "input",
        "output",
        "params",
        "wildcards",
        "threads",
        "resources",
        "log",
        "rule",
        "jobid",
        "bench_iteration",
        "bench_record",
        "is_shell",
    }
)


@dataclass(frozen=True)
class RuleCode:
    """A rule's compiled function (``rule.run_func``), as the direct way reads it."""

    #: Its global ``shell`` is Snakemake's ``shell()``.
    calls_snakemake_shell: bool
    #: Its bytecode: (opname, argval) of each instruction.
    instructions: tuple[tuple[str, Any], ...]
    #: The names of its arguments.
    arguments: frozenset[str]


def rule_code(rule: Any) -> RuleCode | None:
    """``rule``'s compiled function, read (its globals and bytecode); None if it has none.
    Call only where :func:`shell_rule_readable`."""
    func = getattr(rule, "run_func", None)
    if func is None:
        return None
    from snakemake.shell import shell

    code = func.__code__
    return RuleCode(
        calls_snakemake_shell=func.__globals__.get("shell") is shell,
        instructions=tuple((ins.opname, ins.argval) for ins in dis.get_instructions(func)),
        arguments=frozenset(code.co_varnames[: code.co_argcount]),
    )


def shell_command(job: Any) -> str:
    """``job``'s command formatted exactly as Snakemake's ``shell()`` formats it, for a rule
    whose :func:`rule_code` is a literal call of it (the direct way checks that)."""
    rule = job.rule
    local = {
        "input": job.input._plainstrings(),
        "output": job.output._plainstrings(),
        "params": job.params,
        "wildcards": job.wildcards,
        "threads": job.threads,
        "resources": job.resources,
        "log": job.log._plainstrings(),
        "rule": rule.name,
        "jobid": job.jobid,
        "is_shell": True,
        "bench_record": None,
        "bench_iteration": None,
    }
    namespace = ChainMap(local, rule.run_func.__globals__)
    return command_formatter().vformat(rule.shellcmd, (), namespace)


@functools.cache
def _formatters() -> tuple[Any, Any]:
    try:  # Snakemake 10: a package
        from snakemake.utils.format import QuotedFormatter, SequenceFormatter
    except ImportError:  # Snakemake 9: snakemake/utils.py
        from snakemake.utils import QuotedFormatter, SequenceFormatter
    return SequenceFormatter, QuotedFormatter


def command_formatter() -> string.Formatter:
    """The formatter ``shell()`` formats a command with: lists joined by spaces, each
    element quoted where the command says ``:q``."""
    sequence, quoted = _formatters()
    fmt: string.Formatter = sequence(separator=" ")
    fmt.element_formatter = quoted()  # type: ignore[attr-defined]
    return fmt


def module() -> Any:
    """The module ``snakemake.shell`` (``snakemake.shell`` the name is its class)."""
    return importlib.import_module("snakemake.shell")


def subprocess_module() -> Any:
    """The ``subprocess`` module ``shell()`` starts its process with (``sp``: swapped by
    :func:`swap_subprocess`)."""
    return module().sp


def executable() -> str | None:
    """The shell ``shell()`` runs (``shell.executable()``; None: Snakemake's default)."""
    found: str | None = module().shell.get_executable()
    return found


def swap_subprocess(make: Any) -> Any:
    """Replace the ``subprocess`` module that ``shell()`` starts its process with by
    ``make(subprocess, shell's STDOUT)``; what it was."""
    shell_module = module()
    was = shell_module.sp
    shell_module.__dict__["sp"] = make(was, shell_module.STDOUT)
    return was


def _names() -> str:
    shell_module = module()
    cls = shell_module.shell
    return present(
        [
            ("get_executable", callable(getattr(cls, "get_executable", None))),
            ("_get_process_prefix", callable(getattr(cls, "_get_process_prefix", None))),
            ("_process_suffix", isinstance(getattr(cls, "_process_suffix", None), str)),
            ("_processes", isinstance(getattr(cls, "_processes", None), dict)),
            ("_lock", hasattr(cls, "_lock")),
            ("kill", callable(getattr(cls, "kill", None))),
            ("sp", getattr(shell_module, "sp", None) is not None),
            ("STDOUT", hasattr(shell_module, "STDOUT")),
        ]
    )


SHELL = Touch(
    name="reading of shell()",
    kind="read",
    what="shell's executable, prefix, suffix, process table and subprocess (snakemake/shell.py)",
    written_for="9.27.1",
    without=(
        "the direct way cannot run a command as shell() would, a group's pipe consumer "
        "may hang after its producer failed, and warm scripts start fresh interpreters"
    ),
    found=_names,
    fingerprint="get_executable,_get_process_prefix,_process_suffix,_processes,_lock,kill,sp,STDOUT",
)


def _shell_rule_names() -> str:
    import snakemake.api  # noqa: F401  # first: snakemake.workflow imported alone is a cycle
    from snakemake.executors.local import run_wrapper
    from snakemake.iocontainers import Namedlist
    from snakemake.rules import Rule
    from snakemake.shell import shell
    from snakemake.workflow import Workflow

    return present(
        [
            ("Namedlist._plainstrings", callable(getattr(Namedlist, "_plainstrings", None))),
            ("Workflow.shellcmd", callable(getattr(Workflow, "shellcmd", None))),
            ("Workflow.run", callable(getattr(Workflow, "run", None))),
            ("shell", isinstance(shell, type)),
            # set in Rule.__init__ (an instance's attribute): its code stores the name
            ("Rule.run_func", "run_func" in _code_names(Rule.__init__)),
            # what run_wrapper passes a rule's function (RUN_WRAPPER_LOCALS): its variables
            ("run_wrapper", RUN_WRAPPER_LOCALS.issubset(_code_names(run_wrapper, "co_varnames"))),
        ]
    )


def _code_names(func: Any, field: str = "co_names") -> tuple[str, ...]:
    """``func``'s code's names (``co_names``: the attributes and globals it uses;
    ``co_varnames``: its arguments and locals); () for what has no code."""
    return tuple(getattr(getattr(func, "__code__", None), field, ()))


SHELL_RULE = Touch(
    name="reading of a shell: rule",
    kind="read",
    what=(
        "a shell: rule's compiled function (Rule.run_func, its globals and bytecode: "
        "snakemake/parser.py, workflow.py), the arguments the local executor's run_wrapper "
        "passes it (executors/local.py) and Namedlist._plainstrings (iocontainers.py)"
    ),
    written_for="9.27.1",
    without="every job goes the general way (a Snakemake of its own runs it)",
    found=_shell_rule_names,
    fingerprint=(
        "Namedlist._plainstrings,Workflow.shellcmd,Workflow.run,shell,Rule.run_func,run_wrapper"
    ),
)


@functools.cache
def shell_rule_readable() -> bool:
    """Whether this Snakemake is the one :data:`SHELL_RULE` was written for (once)."""
    return SHELL_RULE.matches()


TOUCHES = (SHELL, SHELL_RULE)
