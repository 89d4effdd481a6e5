"""The Snakemake executor: Snakemake's hooks in, calls into the subpackages out.

Threading (see docs/architecture.md): ``run_jobs`` runs on Snakemake's scheduling thread
and must not block; ``check_active_jobs`` and ``sleep`` run on the base class's status
thread, which starts *before* ``__post_init__`` — so everything they touch is set in
``__init__`` before the base class starts that thread. Dask's event thread reports
finished tasks and dead workers (:class:`..dispatch.dispatcher.Dispatcher`); what becomes
of them is :class:`.failures.Failures`'; signals are :mod:`.signals`'. One run's parts
are started, wired and closed by :class:`.run.Run`.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shlex
import sys
import time
import uuid
from collections.abc import AsyncGenerator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo
from snakemake_interface_executor_plugins.executors.remote import RemoteExecutor
from snakemake_interface_executor_plugins.jobs import JobExecutorInterface

from ..dispatch.job_commands import requote_job_args
from ..dispatch.listeners import Listeners
from ..dispatch.registry import JobRegistry
from ..dispatch.scheduling import Given, cap_threads_like_cores, tune_job_scheduler
from ..report.messages import stopped_line
from ..worker import quick_exit, timing
from . import signals
from .wakeup import Wakeup

# The run's machinery (the cluster sources, the dispatcher, the failures, the usage
# report) is imported when a run starts (``__post_init__``), not here: Snakemake's
# executor registry imports this module in every Snakemake process of a machine where the
# plugin is installed, whatever its executor, among them each warm process (its import of
# Snakemake is what a small farm's first warm job waits for) and each cold job's own
# Snakemake (tests/component/test_layering.py).
if TYPE_CHECKING:
    from ..clusters.base import ClusterSource
    from ..clusters.run_dir import RunFiles
    from ..config import RunConfig
    from ..dispatch.outcomes import Finished, WorkerRef
    from .failures import Failures
    from .run import Run

#: Fallback interval of the status loop; completions wake it at once.
STATUS_INTERVAL = 1.0
#: ... but its rounds at least this far apart while jobs end faster (see Wakeup) and at
#: least SETTLE_FROM jobs are in flight: with fewer, the settling would cap the run below
#: SETTLE_FROM / STATUS_SETTLE = 400 jobs a second, more than Snakemake's process starts.
STATUS_SETTLE = 0.02
SETTLE_FROM = 8
#: A scheduling round goes to Dask in chunks: one graph update per chunk (and resource
#: request), sent when it holds CHUNK_JOBS jobs or its first job has waited CHUNK_SECONDS,
#: so that the first tasks of a large round start at once.
CHUNK_JOBS = 64
CHUNK_SECONDS = 0.02


#: What makes a job's own Snakemake run it once, whatever its rule's ``retries:``.
ONE_ATTEMPT = "--preemptible-rules --preemptible-retries 0"


class Executor(RemoteExecutor):
    """Runs each of Snakemake's jobs as a Dask task on the run's cluster (see
    docs/architecture.md, "One run"). Planned and launched in ``__post_init__``, started
    (waited for) at the first job handed over, closed in ``shutdown``."""

    def __init__(self, workflow: Any, logger: Any) -> None:
        # Set before the base class starts the status thread, which may use them at once.
        self._run: Run | None = None  # set at once, when every part of it is wired
        self._registry = JobRegistry()
        self._wakeup = Wakeup(STATUS_SETTLE, lambda: self._registry.in_flight() >= SETTLE_FROM)
        self._closed = False
        self._started = False
        self._launched: RunFiles | None = None  # the cluster launched, not yet started
        self._pending_source: ClusterSource | None = None  # planned, not yet started
        self._scheduling = Given(None, "greedy", None)  # what Snakemake runs with
        self._scheduling_tuned = False
        self._listeners = Listeners()
        if timing.ON:
            timing.record("init", time.time())
        super().__init__(workflow, logger)

    def _say(self, line: str) -> None:
        self.logger.info(f"dask-slurm: {line}")

    def _warn(self, line: str) -> None:
        self.logger.warning(f"dask-slurm: {line}")

    def _error(self, line: str) -> None:
        self.logger.error(f"dask-slurm: {line}")

    def _debug(self, line: str) -> None:
        self.logger.debug(f"dask-slurm: {line}")

    def __post_init__(self) -> None:
        from .. import snakemake_internals
        from ..clusters.choose import local_worker_cpus, make_source, run_security
        from ..clusters.early import EarlyWorkers, worth_starting_early
        from ..clusters.run_dir import check_run_dir
        from ..config import resolve
        from ..dispatch.job_commands import JobCommandBuilder
        from ..errors import DaskSlurmError
        from ..report.usage.write import root_problem
        from .run import claim, launch

        snakemake_internals.install(self._say)
        snakemake_internals.before_first_round(self.workflow, self._tune_scheduling)
        workdir = Path(self.workflow.workdir_init)
        self.config: RunConfig = resolve(self.workflow.executor_settings, os.environ, workdir)
        self._run_token = uuid.uuid4().hex[:8]
        log_dir = self.config.run_dir / "logs"
        self._registry.logs = str(log_dir)
        self._builder = JobCommandBuilder(
            workflow=self.workflow,
            workdir=str(workdir),
            log_root=str(log_dir / "jobs"),
            base_env=self.envvars(),
            direct_shell=self.config.direct_shell,
            format_job_exec=self.format_job_exec,
            run_async=self.workflow.async_run,
            warm=self.config.warm,
        )
        self._say(f"{self.config.cluster} ({self.config.cluster_reason})")
        for warning in self.config.warnings:
            self._warn(warning)
        check_run_dir(self.config.run_dir)
        if self.config.usage_report_dir is not None:
            problem = root_problem(self.config.usage_report_dir)
            if problem:
                raise DaskSlurmError(problem)
        cores = self.workflow.resource_settings.cores
        given_cores = cores if isinstance(cores, int) and not isinstance(cores, bool) else None
        self._local_cores: int | None = None
        if self.config.cluster == "local" and given_cores is None:
            self._local_cores = local_worker_cpus(self.config)
            cap_threads_like_cores(self.workflow, self._local_cores)
            self._say(
                f"local mode: rules claiming more than {self._local_cores} threads will be "
                "scaled down (as with --cores)"
            )
        # Launched at once when there are jobs to run, so that the Dask processes start
        # while Snakemake finishes its own start (and this process imports Dask for the
        # preflight); the first job waits for them. Snakemake calls shutdown() whenever it
        # schedules; if it fails before that, the exit handler stops them. The workers'
        # warm processes parse the workflow meanwhile, if a job of it goes the warm way:
        # in local mode the workers start before the plan for that (clusters/early.py).
        name = f"dask-slurm-{self._run_token}"
        if has_jobs(self.workflow):
            try:
                prime = self._builder.prime_request(jobs_to_look_at(self.workflow))
            except Exception:  # the first warm job starts the warm process, as before
                prime = None
            files, worker_env = claim(self.config, prime)  # the run directory is this run's
            early: EarlyWorkers | None = None
            try:
                if worth_starting_early(self.config, prime):
                    security = run_security(self.config, None)
                    early = EarlyWorkers.start(self.config, security, worker_env)
                # Planned (settings, allocation) now; launched below (Snakemake never
                # calls shutdown() for a run with nothing to do).
                source = make_source(self.config, self.logger, given_cores, name, early)
            except BaseException:
                if early is not None:
                    early.close()
                files.close()
                raise
            self._pending_source = source
            launch(source, files, worker_env)  # (stops it and releases the files if it fails)
            self._launched = files
            atexit.register(self._close_unstarted)
        else:
            self._pending_source = make_source(self.config, self.logger, given_cores, name)
            self._pending_source.preflight()

    @property
    def cores(self) -> Any:
        # What a general-way job's own Snakemake gets as --cores (real.py:101).
        return self._local_cores if self._local_cores else super().cores

    def get_job_args(self, job: JobExecutorInterface, **kwargs: Any) -> str:
        """Snakemake's job arguments, with --target-jobs, --wait-for-files and
        --unneeded-temp-files quoted with shlex.quote instead of repr() (which doubles
        backslashes and lets $ expand in values holding a single quote)."""
        args = super().get_job_args(job, **kwargs)
        replaced = requote_job_args(args, job, self)
        return args if replaced is None else replaced

    def additional_general_args(self) -> str:
        # A spawned Snakemake otherwise waits ~1 s at exit for its job-rate limiter's
        # timer; the outer Snakemake already rate-limits submissions. Its job selection
        # is this run's: greedy unless the user chose ilp (which solves an integer
        # program in a CBC process, ~20-30 ms, for the job's one-job DAG). And it makes
        # one attempt: a rule's own `retries:` outranks the job command's `--retries 0`,
        # but not `--preemptible-retries` (Rule.restart_times), so every attempt is this
        # Snakemake's, with its own resources (docs/further.md, "Retries").
        selection = " --scheduler greedy" if self._scheduling.scheduler == "greedy" else ""
        return f"--max-jobs-per-timespan 100000/0s{selection} {ONE_ATTEMPT}"

    # -- the first round: scheduling settings, the cluster -------------------------------

    def _first_round(self) -> None:
        """Once, on Snakemake's scheduling thread, when the first jobs are handed over."""
        self._started = True
        signals.on_sigterm(self._on_sigterm)
        self._tune_scheduling()
        source, self._pending_source = self._pending_source, None
        files, self._launched = self._launched, None
        if source is not None:
            self._start(source, files)

    def _tune_scheduling(self, scheduler: Any = None) -> None:
        """Snakemake's scheduling settings for a farm, once: before its first round
        (snakemake_internals/scheduler.py), or where that hook is not installed, here."""
        if self._scheduling_tuned:
            return
        self._scheduling_tuned = True
        self._scheduling, line = tune_job_scheduler(self.workflow, sys.argv, scheduler)
        if line:
            self._say(line)

    def _start(self, source: ClusterSource, files: RunFiles | None) -> None:
        from ..dispatch.again import Snakemake
        from .failures import Say
        from .run import Hooks, Run

        hooks = Hooks(
            say=Say(self._say, self._warn, self._error, self._debug),
            snakemake=Snakemake(
                self.report_job_success, self.report_job_error, self.workflow.async_run
            ),
            wake=self._wakeup.set,
            on_removed=self._on_removed,
            exit_gracefully=self._exit_gracefully,
            key_of=self.job_key,
        )
        self._run = Run.start(
            source, self.config, self._registry, self._listeners, self._builder, hooks,
            scheduling=self._scheduling, nodes=self.workflow.resource_settings.nodes,
            token=self._run_token, files=files,
        )  # fmt: skip

    def _exit_gracefully(self) -> None:
        """Snakemake schedules nothing more and ends once its running jobs are reported
        (what its own SIGTERM handler does)."""
        scheduler = getattr(self.workflow, "scheduler", None)
        if scheduler is not None:
            scheduler.exit_gracefully()

    # -- submission (Snakemake's scheduling thread) ---------------------------------------

    def job_key(self, job: JobExecutorInterface) -> str:
        kind = f"group-{job.name}" if job.is_group() else job.name
        return f"{kind}-{job.jobid}-a{job.attempt}-{self._run_token}"

    def run_jobs(self, jobs: list[JobExecutorInterface]) -> None:
        """A scheduling round: each job is announced (``run_job_pre``) as Snakemake's
        default does, and submitted with the other jobs of its chunk."""
        if not self._started:
            self._first_round()
        chunk: list[JobExecutorInterface] = []
        flush_at = 0.0
        for job in jobs:
            self.run_job_pre(job)
            if timing.ON:
                timing.record("submit", self.job_key(job), time.time())
            if not chunk:
                flush_at = time.monotonic() + CHUNK_SECONDS
            chunk.append(job)
            if len(chunk) >= CHUNK_JOBS or time.monotonic() >= flush_at:
                self._submit_chunk(chunk)
                chunk = []
        if chunk:
            self._submit_chunk(chunk)

    def run_job(self, job: JobExecutorInterface) -> None:
        if not self._started:
            self._first_round()
        self._submit_chunk([job])

    def _submit_chunk(self, jobs: list[JobExecutorInterface]) -> None:
        """Admit, build, register and submit ``jobs``; refuse, one by one, those that
        cannot run."""
        run = self._run
        assert run is not None
        records, refused = run.intake.take(jobs)
        stopping, lost = self._registry.hand_over(
            records, self.report_job_submission, run.dispatcher.submit_many
        )
        if self._listeners:
            self._listeners.refused([key for i, _ in stopping if (key := i.external_jobid)])
            self._listeners.handed_over([r for r in records if self._registry.get(r.key) is r])
        for job_info, msg in refused + stopping:
            self.report_job_submission(job_info, register_job=False)
            self.report_job_error(job_info, msg=msg)
        run.failures.again.report_refused(lost)

    def print_job_error(self, job_info: SubmittedJobInfo, msg: Any = None, **kwargs: Any) -> None:
        # The base class appends "see the cluster/cloud log" to every message; ours
        # already name the job's own log.
        if self._registry.is_quiet(job_info.external_jobid):
            return  # said once for all of them (the run failed, or it landed)
        if job_info.external_jobid is not None:
            kwargs["external_jobid"] = job_info.external_jobid
        job = job_info.job
        if job.is_group() and msg:
            # Snakemake's GroupJob.log_error (jobs.py:1498) drops ``msg``: say it first.
            self.logger.error(f"Error in group {job.groupid}: {str(msg).rstrip()}")
        job.log_error(msg, **kwargs)

    def _on_sigterm(self, call_snakemakes_handler: Any) -> None:
        """On SIGTERM (SLURM's time limit), stop running jobs, then let Snakemake end.

        Snakemake's own handler only stops scheduling and waits for running jobs, which at
        a time limit would outlast SLURM's KillWait."""
        keys = self._registry.begin_stop("Snakemake received SIGTERM (e.g. SLURM's time limit)")
        self._registry.quiet(keys)  # one closing message, not one per job
        call_snakemakes_handler()  # Snakemake: schedule nothing more
        running = self._run.failures.stop_jobs(keys) if self._run is not None else set()
        self._warn(stopped_line("SIGTERM received", keys, running))

    # -- completion (the status thread) ----------------------------------------------------

    def _on_removed(self, worker: WorkerRef, silent: bool) -> None:
        """A worker left the scheduler unexpectedly (Dask's event thread)."""
        self._wakeup.set()
        if self._run is not None:
            self._run.failures.worker_removed(worker, silent)

    async def sleep(self) -> None:
        # STATUS_INTERVAL, not next_seconds_between_status_checks: the base class starts
        # this loop before __post_init__ runs, so the first sleep would read Snakemake's
        # default (10 s) and a cluster broken early would go unnoticed that long.
        await self._wakeup.wait(STATUS_INTERVAL)

    async def check_active_jobs(
        self, active_jobs: list[SubmittedJobInfo]
    ) -> AsyncGenerator[SubmittedJobInfo, None]:
        # The base class's list is not used: completions come from Dask's events, so
        # each round costs O(finished jobs), not O(running jobs). Nothing is yielded.
        run = self._run
        if run is not None:
            run.failures.check_cluster()
            for finished in run.dispatcher.drain():
                self._ended(run.failures, finished)
        for _ in ():
            yield _

    @staticmethod
    def _ended(failures: Failures, finished: Finished) -> None:
        if timing.ON:
            timing.record("reporting", finished.key, time.time())
            failures.ended(finished)
            timing.record("told", finished.key, finished.ok, time.time())
        else:
            failures.ended(finished)

    # -- ending ------------------------------------------------------------------------------

    def cancel_jobs(self, active_jobs: list[SubmittedJobInfo]) -> None:
        # Our own registry, not ``active_jobs``: the base class empties that list while
        # a status round runs, so a Ctrl-C at that moment would miss jobs.
        keys = list(self._registry.take_all("the workflow was cancelled"))
        if self._run is not None:
            # Kill, and wait (a few seconds at most) for the killed jobs' outcomes: what
            # they ran goes into the usage report, written once the status thread ends.
            self._run.failures.stop_jobs(keys)

    def shutdown(self) -> None:
        began = time.time()
        try:
            with self.lock:
                self.wait = False
            self._wakeup.hurry()  # the status thread may sit in sleep() for a second
            super().shutdown()
        finally:
            run = self._run
            if run is not None:  # outcomes the status thread did not drain before it ended
                for finished in run.dispatcher.drain():
                    run.failures.tell(finished)
            command = shlex.join(sys.argv)
            self._listeners.run_ending(command)  # the usage report, written while it closes
            self.close_cluster()
            self._listeners.run_ended(command)  # the landing's summary, the report's lines
            quick_exit.collect_then_skip_at_exit()  # Snakemake's exit: 0.3 s less
            if timing.ON:
                timing.record("shutdown", began, time.time())

    def close_cluster(self) -> None:
        """Close the run once (see :meth:`.run.Run.close`), or a cluster launched for a
        run that never handed a job over (every job ran locally, say)."""
        self._close_unstarted()
        if self._closed or self._run is None:
            return
        self._closed = True
        self._run.close(self._registry, self._say)

    def _close_unstarted(self) -> None:
        """Stop a cluster launched at the start whose run never started (at shutdown, or
        at the interpreter's exit when Snakemake failed before its first round)."""
        atexit.unregister(self._close_unstarted)
        source, files = self._pending_source, self._launched
        self._pending_source, self._launched = None, None
        if files is not None and source is not None:
            from .run import stop

            stop(source, files)


def has_jobs(workflow: Any) -> bool:
    """Whether Snakemake will schedule jobs: its DAG holds some (Snakemake says "Nothing to
    be done" and returns before scheduling otherwise, and never calls shutdown()), and this
    is not a dry run."""
    dag = getattr(workflow, "dag", None)
    return dag is not None and bool(len(dag)) and not getattr(workflow, "dryrun", False)


def jobs_to_look_at(workflow: Any) -> Iterator[Any]:
    """Snakemake's jobs to run, the ready ones first, for the warm processes' early parse
    (its DAG's public ``ready_jobs`` and ``needrun_jobs()``; nothing if they are not there)."""
    dag: Any = getattr(workflow, "dag", None)
    with contextlib.suppress(AttributeError, TypeError):
        yield from dag.ready_jobs
        yield from dag.needrun_jobs()
