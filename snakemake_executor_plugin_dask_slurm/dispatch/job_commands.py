"""Turn one Snakemake job into the :class:`~..worker.wire.TaskSpec` a worker runs.

Two ways, both correct:

* **direct** — for eligible ``shell:`` rules: after ``job.prepare()`` (output and log
  directories, stale outputs removed, as Snakemake's own job command would do), the fully
  formatted command is run with the same shell, strict-mode prefix, suffix and
  ``*_NUM_THREADS`` / ``TMPDIR`` variables as Snakemake's ``shell()``.
* **general** — everything else: Snakemake's own job command (``format_job_exec``), in
  the workflow's working directory; a group job's through :mod:`.group_runner`. The worker
  runs it on the warm path (the same arguments, in a process forked from one that has
  the workflow parsed: :mod:`..warm`) when the task carries a :class:`WarmSpec`, else the
  cold way (a fresh Snakemake); ``TaskSpec.cold`` says why not warm.

This module reads a job's and a rule's public attributes beyond the executor interface
(``rule.shellcmd``, ``rule.run_func``, ``job.prepare()``); Snakemake's private code and its
software deployment (conda, containers, modules) it reads through the one room
(:mod:`..snakemake_internals`); the tests run the same rules both ways.
"""

from __future__ import annotations

import asyncio
import dis
import os
import shutil
import string
import sys
from collections import ChainMap
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from snakemake.logging import logger
from snakemake.shell import shell as snakemake_shell

from ..snakemake_internals import deployment
from ..snakemake_internals.shell import SHELL_CALL_LOCALS, command_formatter
from ..snakemake_internals.shell import wrapper as shell_wrapper
from ..warm.command import JobCommand, Unsplittable, parse_job_command
from ..worker.wire import SYSTEM_TMPDIR, TaskSpec, WarmSpec
from .direct_way import MAX_DIRECT_COMMAND, JobFacts, RuleFacts, blockers
from .group_runner import MODULE as GROUP_RUNNER

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
#: The shell for a general-way job command that is not a plain ``[export ... &&] python
#: -m ...`` (never seen from Snakemake 9; every other one runs without a shell). Bash, as
#: Snakemake's own ``shell()`` prefers: a POSIX ``sh`` such as dash drops exported shell
#: functions (``BASH_FUNC_module%%``, an HPC site's ``module``) from the job's environment.
GENERAL_SHELL = shutil.which("bash") or "/bin/sh"


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


#: Why a job goes the cold way when the warm path is turned off.
WARM_OFF = "the warm path is off (--dask-slurm-no-warm)"


def deployment_reason(job: Any, workflow: Any) -> str | None:
    """Why ``job`` (each member of a group) must go the cold way for its software
    deployment, or None. Conda and Apptainer go the cold way: the warm path would run
    Snakemake's same code for them, but no machine the plugin is tested on has them, so
    that is not verified (docs/further.md, "Software deployment"). Environment modules
    take the warm path: tests/test_envmodules.py checks it against a real Lmod."""
    for member in job.jobs if job.is_group() else (job,):
        reason = deployment.cold_reason(member.rule, workflow)
        if reason is not None:
            return reason
    return None


def env_modules_of(rule: Any, workflow: Any) -> Any:
    """The rule's environment modules (Snakemake's ``EnvModules``) when the run loads them
    (``--sdm env-modules``), else None: what the local executor hands ``shell()``."""
    return deployment.rule_software(rule, workflow).modules


def parsed(command: str) -> JobCommand | Unsplittable:
    """``command`` read as a job command (:func:`..warm.command.parse_job_command`), or
    what does not fit; read once per job, for both :func:`general_argv` and
    :func:`warm_spec`."""
    try:
        return parse_job_command(command)
    except Unsplittable as e:
        return e


def general_argv(
    command: str, env: tuple[tuple[str, str], ...], found: JobCommand | Unsplittable | None = None
) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The argument list and environment that run a general-way job command: its
    interpreter, exec'd with the command's exports added to ``env``, as ``sh -c`` would
    (and without a shell between the worker and the job, which could change the job's
    environment); any other shape through :data:`GENERAL_SHELL`. ``found``: the command
    already :func:`parsed`."""
    found = parsed(command) if found is None else found
    if isinstance(found, Unsplittable) or found.cd is not None:
        return (GENERAL_SHELL, "-c", command), env
    return (found.python, "-m", found.module, *found.argv), env + found.exports


def warm_spec(
    command: str, group: bool, log_dir: str, found: JobCommand | Unsplittable | None = None
) -> WarmSpec | str:
    """The warm path's view of a general-way job command, or why it has none (``found``:
    the command already :func:`parsed`)."""
    found = parsed(command) if found is None else found
    if isinstance(found, Unsplittable):
        return f"its job command needs a shell to run: {found}"
    if found.module not in ("snakemake", GROUP_RUNNER):
        return f"its job command runs {found.module}, not snakemake"
    return WarmSpec(found.python, found.argv, found.exports, group, log_dir)


def thread_environment(threads: int) -> tuple[tuple[str, str], ...]:
    value = str(threads)
    return tuple((name, value) for name in THREAD_VARIABLES)


def shell_argv(command: str, wrapper: tuple[str, str, str], modules: Any = None) -> tuple[str, ...]:
    """The argument list Snakemake's ``shell()`` would run ``command`` with; ``modules``:
    the rule's ``EnvModules`` to load first (Snakemake's own ``shellcmd`` wraps it)."""
    executable, prefix, suffix = wrapper
    full = " ".join((prefix, command, suffix)).strip()
    return (executable, "-c", modules.shellcmd(full) if modules is not None else full)


def with_group_runner(command: str, python: str) -> str:
    """Snakemake's job command for a group, run through :mod:`.group_runner` (a race in
    Snakemake's pipe groups can hang the group's own Snakemake for ever). Only when the
    command runs ``python``, this interpreter, which has the plugin; else as it is."""
    head, found, tail = command.partition(f"{python} -m snakemake ")
    return f"{head}{python} -m {GROUP_RUNNER} {tail}" if found else command


async def prepare_all(jobs: Sequence[Any]) -> list[BaseException | None]:
    """``job.prepare()`` for every job, in one event-loop run; each job's error or None."""
    results = await asyncio.gather(*(job.prepare() for job in jobs), return_exceptions=True)
    return [r if isinstance(r, BaseException) else None for r in results]


#: A built job: its spec and way ("direct" or "general"), or why it could not be built.
Built = tuple[TaskSpec, str] | Exception


@dataclass
class JobCommandBuilder:
    """Builds task specs for one run; caches the per-rule eligibility decision."""

    workflow: Any
    workdir: str
    log_root: str
    base_env: Mapping[str, str]
    direct_shell: bool
    format_job_exec: Callable[[Any], str]
    #: Runs a coroutine to completion on Snakemake's side (``workflow.async_run``).
    run_async: Callable[[Awaitable[Any]], Any]
    #: Run general-way jobs on the warm path where they can go (--dask-slurm-no-warm: no).
    warm: bool = False

    def __post_init__(self) -> None:
        self._rule_blockers: dict[str, tuple[str, ...]] = {}
        self._deployment: dict[tuple[str, ...], str | None] = {}
        self._warm_log_dir = os.path.dirname(self.log_root.rstrip("/"))
        self._base_env = tuple(self.base_env.items())
        self._shell = shell_wrapper()
        self._thread_env: dict[int, tuple[tuple[str, str], ...]] = {}
        self._env_modules: dict[str, Any] = {}

    def log_path(self, job: Any) -> str:
        stem = job.logfile_suggestion(self.log_root)[: -len(".log")]
        return f"{stem}.attempt{job.attempt}.log"

    def direct_blockers(self, job: Any) -> tuple[str, ...]:
        """Why ``job`` must go the general way; empty if it may run directly."""
        if not self.direct_shell:
            return ("--dask-slurm-no-direct-shell",)
        if job.is_group():
            return blockers(JobFacts(group=True))
        name = job.rule.name
        found = self._rule_blockers.get(name)
        if found is None:
            found = blockers(rule_facts(job, self.workflow))
            if not found:
                why = literal_shell_rule(job.rule)
                found = (why,) if why else ()
            self._rule_blockers[name] = found
        return found

    def build_many(
        self, jobs: Sequence[tuple[Any, str]], needs: Mapping[str, float | None] | None = None
    ) -> list[Built]:
        """Build each (job, key); the direct way's jobs are prepared together, in one
        event-loop run (``job.prepare()`` is a coroutine). ``needs``: by key, what each
        task needs before its worker's landing point (:attr:`..worker.wire.TaskSpec.needs`)."""
        built: list[Built] = []
        to_prepare: list[tuple[int, Any]] = []
        for job, key in jobs:
            try:
                item = self._draft(job, key, needs.get(key) if needs else None)
            except Exception as e:
                built.append(e)
                continue
            if item[1] == "direct":
                to_prepare.append((len(built), job))
            built.append(item)
        if to_prepare:
            errors = self.run_async(prepare_all([job for _, job in to_prepare]))
            for (index, _), error in zip(to_prepare, errors, strict=True):
                if error is not None:
                    built[index] = error if isinstance(error, Exception) else RuntimeError(error)
        return built

    def _draft(self, job: Any, key: str, needs: float | None = None) -> tuple[TaskSpec, str]:
        """The spec and way of ``job``, before a direct-way job is prepared."""
        if not self.direct_blockers(job):
            spec = self._direct(job, key, needs)
            if spec is not None:
                return spec, "direct"
        changed = target_spec_survives(job)
        if changed:
            raise ValueError(
                f"its wildcard values {changed} cannot be passed to Snakemake's job command "
                "(--target-jobs splits on ',' and strips quotes at either end of a value), "
                "and this job cannot run the direct way"
            )
        command = self.format_job_exec(job)
        if job.is_group():
            command = with_group_runner(command, sys.executable)
        found = parsed(command)
        argv, env = general_argv(command, self._base_env, found)
        warm = self._warm(job, command, found)
        spec = TaskSpec(
            key, argv, self.workdir, env, self.log_path(job), None, job.priority,
            warm=warm if isinstance(warm, WarmSpec) else None,
            cold=warm if isinstance(warm, str) else None, needs=needs,
        )  # fmt: skip
        return spec, "general"

    def _warm(self, job: Any, command: str, found: JobCommand | Unsplittable) -> WarmSpec | str:
        """How the warm path runs this general-way job, or why it goes the cold way."""
        if not self.warm:
            return WARM_OFF
        rules = tuple(sorted(set(job.rules)))
        if rules not in self._deployment:
            self._deployment[rules] = deployment_reason(job, self.workflow)
        reason = self._deployment[rules]
        return reason or warm_spec(command, job.is_group(), self._warm_log_dir, found)

    def _direct(self, job: Any, key: str, needs: float | None = None) -> TaskSpec | None:
        """The direct way's spec, or None when this job must go the general way."""
        try:
            command = shell_command(job)
        except Exception:  # e.g. a resource only the job's own Snakemake defines
            return None
        tmpdir, tmpdir_expression = job_tmpdir(job)
        modules = self._modules(job.rule)
        argv = shell_argv(command, self._shell, modules)
        if blockers(job_facts(job, argv[-1], tmpdir_expression, argv[0])):
            return None
        env = self._thread_env.get(job.threads)
        if env is None:
            env = self._thread_env[job.threads] = self._base_env + thread_environment(job.threads)
        log = self.log_path(job)
        if modules is not None:
            logger.info(f"Activating environment modules: {modules}")  # as shell() says it
        return TaskSpec(key, argv, self.workdir, env, log, tmpdir, job.priority, needs=needs)

    def _modules(self, rule: Any) -> Any:
        """The modules shell() loads for ``rule``'s jobs (None: none), per rule."""
        name = rule.name
        if name not in self._env_modules:
            self._env_modules[name] = env_modules_of(rule, self.workflow)
        return self._env_modules[name]


def _shell_list(flag: str, values: Sequence[Any]) -> str:
    import shlex

    return f"{flag} " + " ".join(shlex.quote(str(v)) for v in values)


def requote_job_args(args: str, job: Any, executor: Any) -> str | None:
    """``args`` (RealExecutor/RemoteExecutor.get_job_args) with its repr()-quoted list
    arguments replaced by exactly shell-quoted ones; None if a part is not found as
    Snakemake built it (then the caller keeps Snakemake's text)."""
    from snakemake_interface_executor_plugins.settings import SharedFSUsage
    from snakemake_interface_executor_plugins.utils import (
        encode_target_jobs_cli_args,
        format_cli_arg,
    )

    parts = [encode_target_jobs_cli_args(job.get_target_spec())]
    flags = ["--target-jobs"]
    unneeded = list(executor.workflow.dag.get_unneeded_temp_files(job))
    if unneeded:
        parts.append(unneeded)
        flags.append("--unneeded-temp-files")
    if SharedFSUsage.INPUT_OUTPUT in executor.workflow.storage_settings.shared_fs_usage:
        wait = [executor.tmpdir, *job.get_wait_for_files()]
        if len(wait) <= 20:  # else Snakemake writes them to a file, one per line: exact
            parts.append(wait)
            flags.append("--wait-for-files")
    for flag, values in zip(flags, parts, strict=True):
        old = format_cli_arg(flag, values)
        if old not in args:
            return None
        args = args.replace(old, _shell_list(flag, values), 1)
    return args


def target_spec_survives(job: Any) -> str | None:
    """None if Snakemake's --target-jobs parser gives back ``job``'s wildcards exactly;
    else the wildcard values it would change (a ',' anywhere, or a quote character at
    either end: snakemake/target_jobs.py:21 splits on ',', common/__init__.py:83 strips
    quotes)."""
    from snakemake.target_jobs import parse_target_jobs_cli_args
    from snakemake_interface_executor_plugins.utils import encode_target_jobs_cli_args

    specs = job.get_target_spec()
    try:
        parsed = parse_target_jobs_cli_args(encode_target_jobs_cli_args(specs))
    except ValueError:
        parsed = None
    if parsed is not None and [dict(p.wildcards_dict) for p in parsed] == [
        {k: str(v) for k, v in s.wildcards_dict.items()} for s in specs
    ]:
        return None
    return (
        ", ".join(
            f"{k}={v!r}"
            for s in specs
            for k, v in s.wildcards_dict.items()
            if "," in str(v) or str(v)[:1] in "'\"" or str(v)[-1:] in "'\""
        )
        or "(unparsable)"
    )
