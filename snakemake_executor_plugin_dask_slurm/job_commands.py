"""Turn one Snakemake job into the :class:`~.worker_task.TaskSpec` a worker runs.

Two ways, both correct:

* **direct** — for eligible ``shell:`` rules: after ``job.prepare()`` (output and log
  directories, stale outputs removed, as Snakemake's own job command would do), the fully
  formatted command is run with the same shell, strict-mode prefix, suffix and
  ``*_NUM_THREADS`` / ``TMPDIR`` variables as Snakemake's ``shell()``.
* **general** — everything else: Snakemake's own job command (``format_job_exec``), a
  fresh Snakemake that runs the job, in the workflow's working directory.

This is the one module that reads Snakemake internals beyond the executor interface
(``rule.shellcmd``, ``job.prepare()``, ``snakemake.shell.shell``); Snakemake is pinned
to 9.x for it and the tests run the same rules both ways.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from snakemake.shell import shell as snakemake_shell

from .eligibility import MAX_DIRECT_COMMAND, JobFacts, RuleFacts, blockers
from .tasks import SYSTEM_TMPDIR, TaskSpec

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
#: The general way runs Snakemake's job command, itself a shell command line.
GENERAL_SHELL = "/bin/sh"


def rule_facts(job: Any, workflow: Any) -> RuleFacts:
    """Read the rule-level eligibility facts off a (non-group) job."""
    rule = job.rule
    settings = workflow.execution_settings
    return RuleFacts(
        not_shell=not job.is_shell or not rule.shellcmd,
        shadow=job.is_shadow,
        conda=rule.conda_env is not None,
        container=rule.container_img is not None,
        envmodules=bool(rule.env_modules),
        benchmark=rule.benchmark is not None,
        cache=rule.cache is not None and rule.cache.output,
        pipe_or_service=job.is_pipe or job.is_service,
        debug_or_edit_notebook=bool(getattr(settings, "debug", False))
        or getattr(settings, "edit_notebook", None) is not None,
    )


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


def job_facts(job: Any, command: str, tmpdir_expression: bool) -> JobFacts:
    """Read the job-level eligibility facts, given the job's formatted command."""
    return JobFacts(
        shell_exec_resource=job.resources.get("shell_exec") is not None,
        tmpdir_placeholder=TBD in command,
        tmpdir_expression=tmpdir_expression,
        too_long=len(command) > MAX_DIRECT_COMMAND,
        storage_files=any(f.is_storage for f in job.input) or any(f.is_storage for f in job.output),
    )


def thread_environment(threads: int) -> tuple[tuple[str, str], ...]:
    value = str(threads)
    return tuple((name, value) for name in THREAD_VARIABLES)


def shell_wrapper() -> tuple[str, str, str]:
    """(shell, prefix, suffix) that Snakemake's ``shell()`` uses, as the Snakefile set them.

    Read once per run, after the Snakefile was parsed (``shell.executable()``,
    ``shell.prefix()`` and ``shell.suffix()`` are set there).
    """
    executable = snakemake_shell.get_executable() or "/bin/sh"
    return (
        executable,
        snakemake_shell._get_process_prefix(executable),
        snakemake_shell._process_suffix,
    )


def shell_argv(command: str, wrapper: tuple[str, str, str]) -> tuple[str, ...]:
    """The argument list Snakemake's ``shell()`` would run ``command`` with."""
    executable, prefix, suffix = wrapper
    return (executable, "-c", " ".join((prefix, command, suffix)).strip())


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

    def __post_init__(self) -> None:
        self._rule_blockers: dict[str, tuple[str, ...]] = {}
        self._base_env = tuple(self.base_env.items())
        self._shell = shell_wrapper()
        self._thread_env: dict[int, tuple[tuple[str, str], ...]] = {}

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
            found = self._rule_blockers[name] = blockers(rule_facts(job, self.workflow))
        return found

    def build_many(self, jobs: Sequence[tuple[Any, str]]) -> list[Built]:
        """Build each (job, key); the direct way's jobs are prepared together, in one
        event-loop run (``job.prepare()`` is a coroutine)."""
        built: list[Built] = []
        to_prepare: list[tuple[int, Any]] = []
        for job, key in jobs:
            try:
                item = self._draft(job, key)
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

    def _draft(self, job: Any, key: str) -> tuple[TaskSpec, str]:
        """The spec and way of ``job``, before a direct-way job is prepared."""
        if not self.direct_blockers(job):
            spec = self._direct(job, key)
            if spec is not None:
                return spec, "direct"
        argv = (GENERAL_SHELL, "-c", self.format_job_exec(job))
        spec = TaskSpec(key, argv, self.workdir, self._base_env, self.log_path(job), None)
        return spec, "general"

    def _direct(self, job: Any, key: str) -> TaskSpec | None:
        """The direct way's spec, or None when this job must go the general way."""
        try:
            command = job.shellcmd
        except Exception:  # e.g. a resource only the job's own Snakemake defines
            return None
        tmpdir, tmpdir_expression = job_tmpdir(job)
        if blockers(job_facts(job, command, tmpdir_expression)):
            return None
        env = self._thread_env.get(job.threads)
        if env is None:
            env = self._thread_env[job.threads] = self._base_env + thread_environment(job.threads)
        argv = shell_argv(command, self._shell)
        return TaskSpec(key, argv, self.workdir, env, self.log_path(job), tmpdir)
