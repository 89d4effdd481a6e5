"""The direct way's command: what Snakemake's ``shell()`` would run for a plain ``shell:``
rule's job, formatted on this side (:func:`shell_command`), the facts that decide whether a
job may go that way (:func:`rule_facts`, :func:`job_facts`), and the argument list and
thread variables ``shell()`` would give it (:func:`shell_argv`, :func:`thread_environment`).

What it reads of Snakemake's code (a rule's compiled function, its bytecode and globals,
the job's plain file lists) is read in snakemake_internals/shell.py (``SHELL_RULE``);
what it decides from that is here.
"""

from __future__ import annotations

import string
from typing import Any

from ..snakemake_internals import deployment
from ..snakemake_internals.shell import (
    RUN_WRAPPER_LOCALS,
    SHELL_CALL_LOCALS,
    rule_code,
    shell_rule_readable,
)
from ..snakemake_internals.shell import (
    shell_command as shell_command,  # the direct way's command, read there
)
from ..worker.wire import SYSTEM_TMPDIR
from .direct_way import MAX_DIRECT_COMMAND, JobFacts, RuleFacts

THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "GOTO_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)
#: What Snakemake prints for a resource it could not evaluate on the submitting side.
TBD = "<TBD>"


def rule_facts(job: Any, workflow: Any) -> RuleFacts:
    """Read the rule-level eligibility facts off a (non-group) job."""
    rule = job.rule
    settings = workflow.execution_settings
    software = deployment.rule_software(rule, workflow)
    return RuleFacts(
        not_shell=not job.is_shell or not rule.shellcmd,
        shadow=job.is_shadow,
        conda=software.conda,
        container=software.container,
        software_env=software.other is not None,
        benchmark=rule.benchmark is not None,
        cache=rule.cache is not None and rule.cache.output,
        pipe_or_service=job.is_pipe or job.is_service,
        debug_or_edit_notebook=bool(getattr(settings, "debug", False))
        or getattr(settings, "edit_notebook", None) is not None,
    )


# -- the command Snakemake's shell() would run -------------------------------------------
#
# How a shell: rule compiles, and how shell() formats its command: snakemake_internals/shell.py
# (which reads the rule's function and formats the command, :func:`shell_command`).

#: Rule-function arguments the direct way can fill in exactly as the local executor does.
_SUPPORTED_LOCALS = RUN_WRAPPER_LOCALS
#: Instructions of a rule function whose body is ``shell(<literal>, bench_record=...,
#: bench_iteration=...)`` (3.11-3.13 spellings); anything else (an f-string, a
#: concatenation with a global...) may differ between definition and run time.
_LITERAL_CALL_OPS = frozenset(
    {
        "RESUME",
        "NOP",
        "CACHE",
        "PUSH_NULL",
        "LOAD_GLOBAL",
        "LOAD_CONST",
        "LOAD_FAST",
        "LOAD_FAST_LOAD_FAST",
        "KW_NAMES",
        "PRECALL",
        "CALL",
        "CALL_KW",
        "POP_TOP",
        "RETURN_VALUE",
        "RETURN_CONST",
    }
)


def _field_roots(command: str) -> set[str] | None:
    """Root names of the replacement fields of ``command``; None if it has fields the
    direct way does not handle (positional, nested in a format spec)."""
    roots: set[str] = set()
    try:
        for _, field, spec, _ in string.Formatter().parse(command):
            if field is None:
                continue
            if spec and "{" in spec:
                return None
            root = field.split(".", 1)[0].split("[", 1)[0]
            if not root.isidentifier():
                return None
            roots.add(root)
    except ValueError:
        return None
    return roots


def literal_shell_rule(rule: Any) -> str | None:
    """Why ``rule``'s command cannot be formatted here exactly as shell() would, or None."""
    if not shell_rule_readable():
        return "this Snakemake's shell: rules are not the ones the direct way reads"
    code = rule_code(rule) if rule.shellcmd else None
    if code is None:
        return "no rule function"
    if not code.calls_snakemake_shell:
        return "shell is not Snakemake's shell()"
    consts = []
    for opname, argval in code.instructions:
        if opname not in _LITERAL_CALL_OPS:
            return "shell: is an expression"
        if opname == "LOAD_GLOBAL" and argval != "shell":
            return "shell: is an expression"
        if (
            opname.startswith("LOAD_FAST")
            and not set(argval if isinstance(argval, tuple) else (argval,)) <= SHELL_CALL_LOCALS
        ):
            return "shell: is an expression"
        if opname == "LOAD_CONST" and isinstance(argval, str):
            consts.append(argval)
    if consts != [rule.shellcmd]:
        return "shell: is an expression"
    roots = _field_roots(rule.shellcmd)
    if roots is None:
        return "command has positional or nested fields"
    if roots & (code.arguments - _SUPPORTED_LOCALS):
        return "command uses a name only Snakemake's own job sets (e.g. {basedir})"
    if roots & (_SUPPORTED_LOCALS - code.arguments):
        return "command uses a name this Snakemake's rule function does not have"
    return None


def job_tmpdir(job: Any) -> tuple[str | None, bool]:
    """Where the direct way points TMPDIR for ``job``, and whether it cannot know.

    Snakemake evaluates ``resources.tmpdir`` only where the job runs, so on this side it is
    ``<TBD>`` unless the rule gave a plain value. Snakemake's default (``system_tmpdir``)
    is the worker's own temporary directory; any other expression (a callable, or
    ``--default-resources tmpdir=...``) can only be evaluated by the general way.
    """
    value = job.resources.get("tmpdir")
    if isinstance(value, str) and TBD not in value:
        return value, False
    declared = job.rule.resources.get("tmpdir") if "tmpdir" in job.rule.resources else None
    if declared is None:
        return None, False
    if getattr(declared, "raw", None) == SYSTEM_TMPDIR:
        return SYSTEM_TMPDIR, False
    return None, True


def job_facts(
    job: Any, command: str, tmpdir_expression: bool, executable: str | None = None
) -> JobFacts:
    """Read the job-level eligibility facts, given the job's formatted command and the
    shell the direct way runs it with. A ``shell_exec`` resource that names that shell
    changes nothing (Snakemake 10 sets it on every rule, to the shell of its definition)."""
    shell_exec = job.resources.get("shell_exec")
    return JobFacts(
        shell_exec_resource=shell_exec is not None and shell_exec != executable,
        tmpdir_placeholder=TBD in command,
        tmpdir_expression=tmpdir_expression,
        too_long=len(command) > MAX_DIRECT_COMMAND,
        storage_files=any(f.is_storage for f in job.input) or any(f.is_storage for f in job.output),
    )


def thread_environment(threads: int) -> tuple[tuple[str, str], ...]:
    value = str(threads)
    return tuple((name, value) for name in THREAD_VARIABLES)


def shell_argv(command: str, wrapper: tuple[str, str, str], modules: Any = None) -> tuple[str, ...]:
    """The argument list Snakemake's ``shell()`` would run ``command`` with; ``modules``:
    the rule's ``EnvModules`` to load first (Snakemake's own ``shellcmd`` wraps it)."""
    executable, prefix, suffix = wrapper
    full = " ".join((prefix, command, suffix)).strip()
    return (executable, "-c", modules.shellcmd(full) if modules is not None else full)
