"""Turn one Snakemake job into the :class:`~..worker.wire.TaskSpec` a worker runs.

Two ways, both correct:

* **direct** — for eligible ``shell:`` rules: after ``job.prepare()`` (output and log
  directories, stale outputs removed, as Snakemake's own job command would do), the fully
  formatted command is run with the same shell, strict-mode prefix, suffix and
  ``*_NUM_THREADS`` / ``TMPDIR`` variables as Snakemake's ``shell()``
  (:mod:`.direct_command` formats it and decides whether a job may go that way).
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
import os
import shutil
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..snakemake_internals import deployment
from ..snakemake_internals.shell import log_info
from ..snakemake_internals.shell import wrapper as shell_wrapper
from ..warm.command import JobCommand, Unsplittable, parse_job_command
from ..worker.wire import TaskSpec, WarmSpec
from .direct_command import (
    job_facts,
    job_tmpdir,
    literal_shell_rule,
    rule_facts,
    shell_argv,
    shell_command,
    thread_environment,
)
from .direct_way import JobFacts, blockers
from .group_runner import MODULE as GROUP_RUNNER

#: The shell for a general-way job command that is not a plain ``[export ... &&] python
#: -m ...`` (never seen from Snakemake 9; every other one runs without a shell). Bash, as
#: Snakemake's own ``shell()`` prefers: a POSIX ``sh`` such as dash drops exported shell
#: functions (``BASH_FUNC_module%%``, an HPC site's ``module``) from the job's environment.
GENERAL_SHELL = shutil.which("bash") or "/bin/sh"


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


#: The key the job command built for :meth:`JobCommandBuilder.prime_request` carries.
PRIME_KEY = "dask-slurm-prime"


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
        return self._general(job, key, needs), "general"

    def _general(self, job: Any, key: str, needs: float | None = None) -> TaskSpec:
        """The general way's spec: Snakemake's job command, warm or cold."""
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
        return TaskSpec(
            key, argv, self.workdir, env, self.log_path(job), None, job.priority,
            warm=warm if isinstance(warm, WarmSpec) else None,
            cold=warm if isinstance(warm, str) else None, needs=needs,
        )  # fmt: skip

    def prime_request(self, jobs: Iterable[Any]) -> dict[str, Any] | None:
        """A job command of this workflow that goes the warm way, for every worker's warm
        process to parse at the worker's start (worker/warm_host.py ``WarmHost.prime``):
        that of the first job in ``jobs`` that goes that way, one job looked at per rule
        (none of a rule Snakemake runs itself, ``job.is_local``: a farm's ``rule all``);
        None if none does, or if a job's command cannot be built yet (it then starts the
        warm process itself). A job of a group (Snakemake's scheduler forms the group jobs
        later) counts by its own job command: the group's differs only in what each job's
        command has of its own (:func:`..warm.snakemake_side.general_argv`), so its first
        group job finds the same parse."""
        if not self.warm:
            return None
        seen: set[str] = set()
        for job in jobs:
            if job.is_group():  # (a group of ready jobs: its jobs come as needrun jobs)
                continue
            name = job.rule.name
            if name in seen:
                continue
            seen.add(name)
            if job.is_local:  # Snakemake runs it itself (a target rule, localrules)
                continue
            if job.group is None and not self.direct_blockers(job):
                continue  # goes the direct way: nothing to parse
            try:
                spec = self._general(job, PRIME_KEY)
            except Exception:
                continue
            warm = spec.warm
            if warm is not None:
                env = [[k, v] for k, v in (*spec.env, *warm.exports)]
                return {
                    "python": warm.python, "argv": list(warm.argv), "env": env,
                    "cwd": spec.cwd, "log_dir": warm.log_dir,
                }  # fmt: skip
        return None

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
            log_info(f"Activating environment modules: {modules}")  # as shell() says it
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
    from snakemake_interface_executor_plugins.utils import encode_target_jobs_cli_args

    from ..snakemake_internals.cli import parse_target_jobs

    specs = job.get_target_spec()
    try:
        parsed = parse_target_jobs(encode_target_jobs_cli_args(specs))
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
