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

Which way a job goes is :func:`.way.decide`'s (pure); this module reads the facts it needs
off the job, once per rule where they are the rule's.

This module reads a job's and a rule's public attributes beyond the executor interface
(``rule.shellcmd``, ``rule.run_func``, ``job.prepare()``); Snakemake's private code and its
software deployment (conda, containers, modules) it reads through the one room
(:mod:`..snakemake_internals`); the tests run the same rules both ways.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..report.detail import detail
from ..snakemake_internals import deployment
from ..snakemake_internals.shell import log_info
from ..snakemake_internals.shell import wrapper as shell_wrapper
from ..worker.wire import Cold, TaskSpec, WarmSpec, Way
from .direct_command import (
    job_facts,
    job_tmpdir,
    literal_shell_rule,
    rule_facts,
    shell_argv,
    shell_command,
    thread_environment,
)
from .direct_way import NotDirect, blockers
from .general_command import general_argv, parsed, prepare_all, with_group_runner
from .way import (
    DIRECT,
    Chosen,
    Direct,
    DirectDraft,
    Facts,
    Warm,
    decide,
    not_direct,
    way_name,
)


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


#: A built job: its spec and way ("direct", "warm" or "cold", as chosen here: the worker
#: may still send a warm job cold), or why it could not be built.
Built = tuple[TaskSpec, Way] | Exception


@dataclass
class JobCommandBuilder:
    """Builds task specs for one run; caches what it reads per rule."""

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
        self._rule_not_direct: dict[str, tuple[NotDirect, ...]] = {}
        #: How a rule's ``shell:`` is not literal (the detail log says it), by rule.
        self._not_literal: dict[str, str] = {}
        self._deployment: dict[tuple[str, ...], str | None] = {}
        #: Rules (and groups) whose general way the detail log has told.
        self._told: set[str] = set()
        #: The facts of every job that goes the direct way (one value: built once).
        self._direct_way_facts = Facts(True, self.warm)
        self._warm_log_dir = os.path.dirname(self.log_root.rstrip("/"))
        self._base_env = tuple(self.base_env.items())
        self._shell = shell_wrapper()
        self._thread_env: dict[int, tuple[tuple[str, str], ...]] = {}
        self._env_modules: dict[str, Any] = {}

    def log_path(self, job: Any) -> str:
        stem = job.logfile_suggestion(self.log_root)[: -len(".log")]
        return f"{stem}.attempt{job.attempt}.log"

    def rule_not_direct(self, job: Any) -> tuple[NotDirect, ...]:
        """Why the jobs of (non-group) ``job``'s rule cannot go the direct way (per rule)."""
        name = job.rule.name
        found = self._rule_not_direct.get(name)
        if found is None:
            found = blockers(rule_facts(job, self.workflow))
            if not found:
                literal = literal_shell_rule(job.rule)
                if literal:
                    self._not_literal[name] = literal
                found = (NotDirect.NOT_LITERAL,) if literal else ()
            self._rule_not_direct[name] = found
        return found

    def choose(self, job: Any, group: bool, tell: bool = True) -> Chosen:
        """``job``'s way and what it runs; ``group``: a group job, or a job of a group
        Snakemake forms later (its own job command is read); ``tell``: the detail log
        says the rule's general way (once; not for :meth:`prime_request`, which runs
        before the detail log is open)."""
        facts, draft = self._direct_facts(job, group)
        if draft is not None:  # (decide(facts) is DIRECT: not asked again per job)
            return Chosen(DIRECT, draft)
        return self._general_way(job, facts, tell)

    def _general_way(self, job: Any, facts: Facts, tell: bool) -> Chosen:
        """:meth:`choose` for a job that cannot go the direct way (``facts``: why not)."""
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
        deployment = self._deployment_of(job) if self.warm else None
        facts = Facts(
            facts.direct_shell, facts.warm, facts.group, facts.rule, facts.job, deployment, found
        )
        way = decide(facts)
        if tell and job.name not in self._told:
            self._tell(job, facts, way)
        return Chosen(way, None, command, found)

    def _direct_facts(self, job: Any, group: bool) -> tuple[Facts, DirectDraft | None]:
        """The facts up to the direct question, and the direct way's draft if it goes so
        (the job-level facts are read only when its rule's allow the direct way)."""
        if not self.direct_shell or group:
            return Facts(self.direct_shell, self.warm, group), None
        rule = self.rule_not_direct(job)
        if rule:
            return Facts(True, self.warm, False, rule), None
        draft = self._direct_draft(job)
        if not isinstance(draft, DirectDraft):  # (a DirectDraft is a tuple too)
            return Facts(True, self.warm, False, (), draft), None
        return self._direct_way_facts, draft

    def _direct_draft(self, job: Any) -> DirectDraft | tuple[NotDirect, ...]:
        """What the direct way runs for ``job``, or why this job cannot go that way."""
        try:
            command = shell_command(job)
        except Exception:  # e.g. a resource only the job's own Snakemake defines
            return (NotDirect.UNFORMATTABLE,)
        tmpdir, tmpdir_expression = job_tmpdir(job)
        modules = self._modules(job.rule)
        argv = shell_argv(command, self._shell, modules)
        why_not = blockers(job_facts(job, argv[-1], tmpdir_expression, argv[0]))
        return why_not or DirectDraft(argv, tmpdir, modules)

    def _deployment_of(self, job: Any) -> str | None:
        """:func:`deployment_reason`, per set of rules."""
        rules = tuple(sorted(set(job.rules)))
        if rules not in self._deployment:
            self._deployment[rules] = deployment_reason(job, self.workflow)
        return self._deployment[rules]

    def _tell(self, job: Any, facts: Facts, way: Direct | Warm | Cold) -> None:
        """The detail log's line for the first general-way job of a rule (or group): why
        not direct, and warm or cold. Once per rule: the run's console stays as it was,
        and the cost is a set lookup per job."""
        self._told.add(job.name)
        why = ", ".join(not_direct(facts))
        literal = self._not_literal.get(job.name)
        if literal is not None:
            why += f" ({literal})"
        cold = f": {way}" if isinstance(way, Cold) else ""
        detail.info(f"{job.name}: the general way ({why}), {way_name(way)}{cold}")

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

    def _draft(self, job: Any, key: str, needs: float | None = None) -> tuple[TaskSpec, Way]:
        """The spec and way of ``job``, before a direct-way job is prepared."""
        facts, draft = self._direct_facts(job, job.is_group())
        if draft is not None:
            return self._direct(job, key, draft, needs), "direct"
        chosen = self._general_way(job, facts, True)
        return self._general(job, key, chosen, needs), way_name(chosen.way)

    def _general(self, job: Any, key: str, chosen: Chosen, needs: float | None) -> TaskSpec:
        """The general way's spec: Snakemake's job command, warm or cold."""
        argv, env = general_argv(chosen.command, self._base_env, chosen.found)
        way = chosen.way
        warm = None
        if isinstance(way, Warm):  # (decide read its command: run as it was split)
            found = way.command
            warm = WarmSpec(
                found.python, found.argv, found.exports, job.is_group(), self._warm_log_dir
            )
        return TaskSpec(
            key, argv, self.workdir, env, self.log_path(job), None, job.priority,
            warm=warm, cold=way if isinstance(way, Cold) else None, needs=needs,
            batch=job.name if warm is not None and not job.is_group() else None,
        )  # fmt: skip

    def prime_request(self, jobs: Iterable[Any]) -> dict[str, Any] | None:
        """A job command of this workflow that goes the warm way, for every worker's warm
        process to parse at the worker's start (worker/warm_host.py ``WarmHost.prime``):
        that of the first job in ``jobs`` that goes that way (:meth:`choose`, as its
        build), one job looked at per rule (none of a rule Snakemake runs itself,
        ``job.is_local``: a farm's ``rule all``); None if none does, or if a job's command
        cannot be built yet (it then starts the warm process itself). A job of a group
        (Snakemake's scheduler forms the group jobs later) counts by its own job command:
        the group's differs only in what each job's command has of its own
        (:func:`..warm.snakemake_side.parse_key`), so its first group job finds the
        same parse."""
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
            try:
                chosen = self.choose(job, job.group is not None, tell=False)
            except Exception:
                continue
            if isinstance(chosen.way, Warm):
                found = chosen.way.command
                _, env = general_argv(chosen.command, self._base_env, chosen.found)
                return {
                    "python": found.python, "argv": list(found.argv),
                    "env": [[k, v] for k, v in (*env, *found.exports)],
                    "cwd": self.workdir, "log_dir": self._warm_log_dir,
                }  # fmt: skip
        return None

    def _direct(self, job: Any, key: str, draft: DirectDraft, needs: float | None) -> TaskSpec:
        """The direct way's spec."""
        env = self._thread_env.get(job.threads)
        if env is None:
            env = self._thread_env[job.threads] = self._base_env + thread_environment(job.threads)
        log = self.log_path(job)
        if draft.modules is not None:
            log_info(f"Activating environment modules: {draft.modules}")  # as shell() says it
        return TaskSpec(
            key, draft.argv, self.workdir, env, log, draft.tmpdir, job.priority, needs=needs,
            batch=None if job.is_group() else job.name,
        )  # fmt: skip

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
