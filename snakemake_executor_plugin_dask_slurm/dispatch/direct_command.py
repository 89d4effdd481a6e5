"""The direct way's command: what Snakemake's ``shell()`` would run for a plain ``shell:``
rule's job, formatted on this side (:func:`shell_command`), the facts that decide whether a
job may go that way (:func:`rule_facts`, :func:`job_facts`), and the argument list and
thread variables ``shell()`` would give it (:func:`shell_argv`, :func:`thread_environment`).
"""

from __future__ import annotations

import dis
import string
from collections import ChainMap
from typing import Any

from snakemake.shell import shell as snakemake_shell

from ..snakemake_internals import deployment
from ..snakemake_internals.shell import SHELL_CALL_LOCALS, command_formatter
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
# A shell: rule compiles (snakemake/parser.py, class Shell/Run) to
#     @workflow.shellcmd(CMD)
#     @workflow.run
#     def __rule_NAME(input, output, params, wildcards, threads, resources, log, rule, ...):
#         shell(CMD, bench_record=bench_record, bench_iteration=bench_iteration)
# (Snakemake 10: ``shell(CMD, run_args=run_args)``, snakemake_internals.shell.SHELL_CALL_LOCALS)
# and shell() formats CMD with snakemake.utils.format(stepout=2): the globals of that
# function (the namespace the rule was defined in: the module's for a module rule, also
# when `use rule ... with:` renames it), then its arguments (what the local executor's
# run_wrapper passes, snakemake/executors/local.py:111-172 and :287), then
# bench_record/bench_iteration. Job.shellcmd (jobs.py:616, format_wildcards :980) uses the
# main Snakefile's globals and a different set of names instead.

#: Rule-function arguments the direct way can fill in exactly as the local executor does.
_SUPPORTED_LOCALS = frozenset(
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
    func = getattr(rule, "run_func", None)
    if func is None or not rule.shellcmd:
        return "no rule function"
    if func.__globals__.get("shell") is not snakemake_shell:
        return "shell is not Snakemake's shell()"
    consts = []
    for ins in dis.get_instructions(func):
        if ins.opname not in _LITERAL_CALL_OPS:
            return "shell: is an expression"
        if ins.opname == "LOAD_GLOBAL" and ins.argval != "shell":
            return "shell: is an expression"
        if (
            ins.opname.startswith("LOAD_FAST")
            and not set(ins.argval if isinstance(ins.argval, tuple) else (ins.argval,))
            <= SHELL_CALL_LOCALS
        ):
            return "shell: is an expression"
        if ins.opname == "LOAD_CONST" and isinstance(ins.argval, str):
            consts.append(ins.argval)
    if consts != [rule.shellcmd]:
        return "shell: is an expression"
    roots = _field_roots(rule.shellcmd)
    if roots is None:
        return "command has positional or nested fields"
    rule_args = set(func.__code__.co_varnames[: func.__code__.co_argcount])
    if roots & (rule_args - _SUPPORTED_LOCALS):
        return "command uses a name only Snakemake's own job sets (e.g. {basedir})"
    if roots & (_SUPPORTED_LOCALS - rule_args):
        return "command uses a name this Snakemake's rule function does not have"
    return None


def shell_command(job: Any) -> str:
    """``job``'s command formatted exactly as Snakemake's shell() formats it."""
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
