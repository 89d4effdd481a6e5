"""The Snakemake executor: Snakemake's hooks in, calls into the subpackages out.

Threading (see docs/architecture.md): ``run_jobs`` runs on Snakemake's scheduling thread
and must not block; ``check_active_jobs`` and ``sleep`` run on the base class's status
thread, which starts *before* ``__post_init__`` — so everything they touch is set in
``__init__`` before the base class starts that thread. Dask's event thread reports
finished tasks and dead workers (:class:`..dispatch.dispatcher.Dispatcher`); what becomes
of them is settled on the dispatch side (:class:`..dispatch.ends.Settler`); signals are
:mod:`.signals`'. One run is planned, launched, started, wired and closed in :mod:`.run`
(:class:`.run.PlannedRun`, :class:`.run.WiredRun`).
"""

from __future__ import annotations

import os
import shlex
import sys
import time
import uuid
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo
from snakemake_interface_executor_plugins.executors.remote import RemoteExecutor
from snakemake_interface_executor_plugins.jobs import JobExecutorInterface

from ..dispatch.job_commands import requote_job_args
from ..dispatch.listeners import Listeners
from ..dispatch.registry import JobRegistry
from ..dispatch.scheduling import Given, tune_job_scheduler
from ..report.messages import stopped_line
from ..worker import quick_exit, timing
from . import signals
from .say import Say
from .wakeup import Wakeup

# The run's machinery is imported when a run starts, not here: Snakemake imports this
# module in every Snakemake process where the plugin is installed, each warm process and
# each cold job's own among them (tests/component/test_layering.py).
if TYPE_CHECKING:
    from ..clusters.base import ClusterSource
    from ..clusters.run_dir import RunFiles
    from ..config import RunConfig
    from ..dispatch.outcomes import WorkerRef
    from .run import PlannedRun, WiredRun

#: Fallback interval of the status loop; completions wake it at once.
STATUS_INTERVAL = 1.0
#: ... but its rounds at least this far apart while jobs end faster (see Wakeup) and at
#: least SETTLE_FROM jobs are in flight: with fewer, the settling would cap the run below
#: SETTLE_FROM / STATUS_SETTLE = 400 jobs a second, more than Snakemake's process starts.
STATUS_SETTLE = 0.02
SETTLE_FROM = 8

#: What makes a job's own Snakemake run it once, whatever its rule's ``retries:``.
ONE_ATTEMPT = "--preemptible-rules --preemptible-retries 0"


class Executor(RemoteExecutor):
    """Runs each of Snakemake's jobs as a Dask task on the run's cluster (see
    docs/architecture.md, "One run"). Planned and launched in ``__post_init__``, started
    (waited for) at the first job handed over, closed in ``shutdown``."""

    def __init__(self, workflow: Any, logger: Any) -> None:
        # Set before the base class starts the status thread, which may use them at once.
        self._run: WiredRun | None = None  # set at once, when every part of it is wired
        self._registry = JobRegistry()  # its log directory is known in __post_init__
        self._wakeup = Wakeup(STATUS_SETTLE, lambda: self._registry.in_flight() >= SETTLE_FROM)
        self._closed = False
        self._started = False
        self._planned: PlannedRun | None = None  # planned (launched), not yet started
        self._scheduling = Given(None, "greedy", None)  # what Snakemake runs with
        self._scheduling_tuned = False
        self._listeners = Listeners()
        self._said = Say.to(logger)  # one line to the user, at a level
        if timing.ON:
            timing.record("init", time.time())
        super().__init__(workflow, logger)

    def __post_init__(self) -> None:
        from .. import snakemake_internals
        from ..config import resolve
        from ..dispatch.job_commands import JobCommandBuilder
        from .run import PlannedRun, cap_local_threads, check_run, given_cores

        snakemake_internals.install(self._said.info)
        snakemake_internals.before_first_round(self.workflow, self._tune_scheduling)
        workdir = Path(self.workflow.workdir_init)
        self.config: RunConfig = resolve(self.workflow.executor_settings, os.environ, workdir)
        self._run_token = uuid.uuid4().hex[:8]
        log_dir = self.config.run_dir / "logs"
        self._registry.logs = str(log_dir)  # (a value for its messages; read once started)
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
        self._said.info(f"{self.config.cluster} ({self.config.cluster_reason})")
        for warning in self.config.warnings:
            self._said.warn(warning)
        check_run(self.config)
        cores = given_cores(self.workflow)
        self._local_cores = cap_local_threads(self.config, self.workflow, cores, self._said.info)
        self._planned = PlannedRun.plan(
            self.config, self._builder, self.workflow, self.logger, cores,
            f"dask-slurm-{self._run_token}",
        )  # fmt: skip

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

    def _started_run(self) -> WiredRun:
        """The run; started once, on Snakemake's scheduling thread, when the first jobs
        are handed over."""
        if not self._started:
            self._started = True
            signals.on_sigterm(self._on_sigterm)
            self._tune_scheduling()
            taken = self._planned.take() if self._planned is not None else None
            if taken is not None:
                self._run = self._start(*taken)
        assert self._run is not None
        return self._run

    def _tune_scheduling(self, scheduler: Any = None) -> None:
        """Snakemake's scheduling settings for a farm, once: before its first round
        (snakemake_internals/scheduler.py), or where that hook is not installed, here."""
        if self._scheduling_tuned:
            return
        self._scheduling_tuned = True
        self._scheduling, line = tune_job_scheduler(self.workflow, sys.argv, scheduler)
        if line:
            self._said.info(line)

    def _start(self, source: ClusterSource, files: RunFiles | None) -> WiredRun:
        from ..dispatch.again import Snakemake
        from ..snakemake_internals.scheduler import progress as snakemake_progress
        from .run import Hooks, WiredRun

        hooks = Hooks(
            say=self._said,
            snakemake=Snakemake(
                self.report_job_success,
                self.report_job_error,
                self.workflow.async_run,
                self.report_job_submission,
            ),
            wake=self._wakeup.set,
            on_removed=self._on_removed,
            exit_gracefully=self._exit_gracefully,
            key_of=self.job_key,
            progress=lambda: snakemake_progress(self.workflow),
        )
        return WiredRun.start(
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
        """A scheduling round, handed over in chunks
        (:meth:`..dispatch.ends.Submitter.submit_round`)."""
        self._started_run().submitter.submit_round(jobs, self.run_job_pre)

    def run_job(self, job: JobExecutorInterface) -> None:
        self._started_run().submitter.submit([job])

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
        running = self._run.stopper.stop_jobs(keys) if self._run is not None else set()
        self._said.warn(stopped_line("SIGTERM received", keys, running))

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
            run.settler.settle_finished()  # each told, routed and carried out by dispatch
        for _ in ():
            yield _

    # -- ending ------------------------------------------------------------------------------

    def cancel_jobs(self, active_jobs: list[SubmittedJobInfo]) -> None:
        # Our own registry, not ``active_jobs``: the base class empties that list while
        # a status round runs, so a Ctrl-C at that moment would miss jobs.
        keys = list(self._registry.take_all("the workflow was cancelled"))
        if self._run is not None:
            # Kill, and wait (a few seconds at most) for the killed jobs' outcomes: what
            # they ran goes into the usage report, written once the status thread ends.
            self._run.stopper.stop_jobs(keys)

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
                run.settler.tell_finished()
                run.status.close(interrupted=self._registry.stop_reason is not None)
            command = shlex.join(sys.argv)
            self._listeners.run_ending(command)  # the usage report, written while it closes
            self.close_cluster()
            self._listeners.run_ended(command)  # the landing's summary, the report's lines
            quick_exit.collect_then_skip_at_exit()  # Snakemake's exit: 0.3 s less
            if timing.ON:
                timing.record("shutdown", began, time.time())

    def close_cluster(self) -> None:
        """Close the run once (see :meth:`.run.WiredRun.close`), or a cluster launched for
        a run that never handed a job over (every job ran locally, say)."""
        if self._planned is not None:
            self._planned.close()
        if self._closed or self._run is None:
            return
        self._closed = True
        self._run.close(self._registry, self._said.info)
