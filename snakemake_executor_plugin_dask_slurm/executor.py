"""The Snakemake executor: Snakemake's hooks in, calls into the subpackages out.

Threading (see docs/architecture.md): ``run_jobs`` runs on Snakemake's scheduling thread
and must not block; ``check_active_jobs`` and ``sleep`` run on the base class's status
thread, which starts *before* ``__post_init__`` — so everything they touch is set in
``__init__`` before the base class starts that thread. Dask's event thread reports
finished tasks and dead workers (:class:`.dispatch.dispatcher.Dispatcher`); a recovery
thread waits for dead workers' jobs to be gone (:class:`.dispatch.recovery.Recovery`);
stopping every job (SIGTERM, a broken cluster) happens on a thread of its own. Which
jobs are registered, and whether the run stops, is the :class:`.dispatch.registry.JobRegistry`'s
to say, under its lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shlex
import shutil
import signal
import sys
import threading
import time
import uuid
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path
from typing import Any

from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo
from snakemake_interface_executor_plugins.executors.remote import RemoteExecutor
from snakemake_interface_executor_plugins.jobs import JobExecutorInterface

from .clusters.base import ClusterSource
from .clusters.choose import check_run_dir, local_worker_cpus, make_source, make_worker_jobs
from .clusters.security import PlainTcp
from .clusters.worker_jobs.pool import WorkerJobs
from .config import RunConfig, resolve
from .dispatch.admission import Capacity
from .dispatch.dispatcher import Dispatcher
from .dispatch.health import no_worker_problem
from .dispatch.intake import Intake
from .dispatch.job_commands import JobCommandBuilder, requote_job_args
from .dispatch.landing import AllocationClock
from .dispatch.landing_policy import AllocationEnd, duration_text
from .dispatch.outcomes import Finished, WorkerRef
from .dispatch.recovery import Gone, Recovery, decide
from .dispatch.registry import JobRegistry, Refusal, counts_by_rule
from .dispatch.scheduling import Given, cap_threads_like_cores, tune_job_scheduler
from .report.hints import speed_hint
from .report.messages import failure_message, job_label
from .slurm.run import scontrol_time_left
from .slurm.walltime import allocation_end
from .worker import timing
from .worker.wire import TaskSpec

#: Seconds to wait for scontrol's answer about the time left.
SCONTROL_TIMEOUT = 10.0
#: Fallback interval of the status loop; completions wake it at once.
STATUS_INTERVAL = 1.0
#: Seconds between checks that the cluster's processes are still alive.
HEALTH_CHECK_INTERVAL = 0.5
#: A scheduling round goes to Dask in chunks: one graph update per chunk (and resource
#: request), sent when it holds CHUNK_JOBS jobs or its first job has waited CHUNK_SECONDS,
#: so that the first tasks of a large round start at once.
CHUNK_JOBS = 64
CHUNK_SECONDS = 0.02


class Executor(RemoteExecutor):
    def __init__(self, workflow: Any, logger: Any) -> None:
        # Set before the base class starts the status thread, which may use them at once.
        self._dispatcher: Dispatcher | None = None
        self._registry = JobRegistry()
        self._wake_loop: asyncio.AbstractEventLoop | None = None
        self._wake_event: asyncio.Event | None = None
        self._source: ClusterSource | None = None
        self._closed = False
        self._sigterm: threading.Event | None = None
        self._recovery: Recovery | None = None
        self._no_workers_since: float | None = None
        self._scheduling = Given(None, "greedy", None)  # what Snakemake runs with
        self._next_health_check = 0.0
        self._clock: AllocationClock | None = None
        self._worker_jobs: WorkerJobs | None = None
        if timing.ON:
            timing.record("init", time.time())
        super().__init__(workflow, logger)

    def __post_init__(self) -> None:
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
        )
        self.logger.info(f"dask-slurm: {self.config.cluster} ({self.config.cluster_reason})")
        for warning in self.config.warnings:
            self.logger.warning(f"dask-slurm: {warning}")
        check_run_dir(self.config.run_dir)
        cores = self.workflow.resource_settings.cores
        given_cores = cores if isinstance(cores, int) and not isinstance(cores, bool) else None
        # Planned (settings, allocation, preflight) now; started at the first job, so a
        # run with nothing to do (Snakemake never calls shutdown() then) starts nothing.
        self._pending_source: ClusterSource | None = make_source(
            self.config, self.logger, given_cores
        )
        self._worker_jobs = make_worker_jobs(
            self.config,
            self._pending_source,
            f"dask-slurm-{self._run_token}",
            lambda line: self.logger.info(f"dask-slurm: {line}"),
            lambda line: self.logger.warning(f"dask-slurm: {line}"),
        )
        if self._worker_jobs is not None:
            self.logger.info(
                f"dask-slurm: the farm grows with up to {self._worker_jobs.config.max_jobs} worker "
                f"job(s) while jobs wait ({self._worker_jobs.options_text()}); checked with "
                "sbatch --test-only"
            )
        self._local_cores: int | None = None
        if self.config.cluster == "local" and given_cores is None:
            self._local_cores = local_worker_cpus(self.config)
            cap_threads_like_cores(self.workflow, self._local_cores)
            self.logger.info(
                f"dask-slurm: local mode: rules claiming more than {self._local_cores} "
                "threads will be scaled down (as with --cores)"
            )

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
        # timer; the outer Snakemake already rate-limits submissions.
        return "--max-jobs-per-timespan 100000/0s"

    # -- the first round: scheduling settings, the cluster -------------------------

    def _first_round(self) -> None:
        """Once, on Snakemake's scheduling thread, when the first jobs are handed over."""
        self._install_sigterm_handler()
        self._scheduling, line = tune_job_scheduler(self.workflow, sys.argv)
        if line:
            self.logger.info(f"dask-slurm: {line}")
        self._start_cluster()

    def _start_cluster(self) -> None:
        source, self._pending_source = self._pending_source, None
        if source is None:
            return
        self.logger.info(f"dask-slurm: starting {source.description}")
        client = source.start()  # stops what it started if it fails
        try:
            offers = [
                w.get("resources", {})
                for w in client.scheduler_info(n_workers=-1)["workers"].values()
            ]
            growth = self._worker_jobs
            capacity = Capacity.from_workers(offers + (growth.offers() if growth else []))
            for line in source.summary():
                self.logger.info(f"dask-slurm: {line}")
            if isinstance(source.security, PlainTcp):
                self.logger.warning(f"dask-slurm: security: {source.security.describe()}")
            elif source.security.describe():
                self.logger.info(f"dask-slurm: security: {source.security.describe()}")
            for warning in source.warnings():
                self.logger.warning(f"dask-slurm: {warning}")
            self._hint_speed(int(sum(offer.get("cpus", 0) for offer in offers)))
        except BaseException:
            source.close()
            raise
        self._source = source
        if timing.ON:
            timing.record("ready", time.time(), int(sum(o.get("cpus", 0) for o in offers)))
            timing.record("cluster_start", getattr(source, "bringup_seconds", None) or 0.0)
        self._clock = self._watch_clock()
        self._intake = Intake(
            self._builder,
            capacity,
            cap=self.config.cluster == "local",
            key_of=self.job_key,
            note=lambda line: self.logger.info(f"dask-slurm: {line}"),
            check_time=self._clock.check if self._clock else None,
        )
        self._recovery = Recovery(
            source.record_dir, self._sweep, self._on_gone, self._on_worker_removed
        )
        self._dispatcher = Dispatcher(client, self._wake, lambda _address: self._on_removed())
        if self._worker_jobs is not None:
            self._worker_jobs.start(client)

    def _sweep(self, worker: str, keys: Sequence[str]) -> str | None:
        """End a dead worker's jobs' processes: in its worker job, or where the source
        started it."""
        if self._worker_jobs is not None and self._worker_jobs.owns(worker):
            return self._worker_jobs.sweep(worker, list(keys))
        return self._source.sweep(worker, keys) if self._source is not None else None

    def _watch_clock(self) -> AllocationClock | None:
        """Inside an allocation: its end (one question to SLURM), the landing thread, and
        SIGUSR1 to land at once. None outside SLURM or with --dask-slurm-landing-margin 0."""
        job_id = os.environ.get("SLURM_JOB_ID")
        if not job_id or self.config.landing_margin <= 0:
            return None
        scontrol = shutil.which("scontrol")

        def time_left() -> float | None:
            return scontrol_time_left(scontrol, job_id, SCONTROL_TIMEOUT) if scontrol else None

        now = time.time()
        found = allocation_end(os.environ, time_left(), now)
        clock, margin = None, self.config.landing_margin
        if found is not None:
            end, source = found
            # A short allocation scales both margins down, so that it still does work.
            margin = min(margin, max(0.0, end - now) / 4)
            safety = self.config.runtime_margin * margin / self.config.landing_margin
            clock = AllocationEnd(end, margin, safety, source)
            shortened = (
                f" (a quarter of the time left, less than --dask-slurm-landing-margin "
                f"{self.config.landing_margin:g}; --dask-slurm-runtime-margin scaled alike)"
                if margin < self.config.landing_margin
                else ""
            )
            self.logger.info(
                f"dask-slurm: allocation {job_id} ends in {duration_text(end - now)}, at "
                f"{time.strftime('%H:%M:%S', time.localtime(end))} on every node (from "
                f"{source}): the run lands {duration_text(margin)} before, at "
                f"{time.strftime('%H:%M:%S', time.localtime(end - margin))}{shortened}, and "
                "a job starts only if it can finish by then; SIGUSR1 lands it at once"
            )
        else:
            self.logger.info(
                f"dask-slurm: allocation {job_id} has no time limit SLURM could tell: no "
                "landing point; SIGUSR1 (e.g. sbatch --signal=USR1@120) lands the run"
            )
        watch = AllocationClock(
            clock,
            margin,
            time_left if scontrol else None,
            self._registry,
            self._stop_jobs,
            self._exit_gracefully,
            lambda line: self.logger.warning(f"dask-slurm: {line}"),
        )
        if threading.current_thread() is threading.main_thread():
            request = watch.watch.request
            signal.signal(signal.SIGUSR1, lambda signum, frame: request("SIGUSR1 received"))
        watch.watch.start()
        return watch

    def _exit_gracefully(self) -> None:
        """Snakemake schedules nothing more and ends once its running jobs are reported
        (what its own SIGTERM handler does)."""
        scheduler = getattr(self.workflow, "scheduler", None)
        if scheduler is not None:
            scheduler.exit_gracefully()

    def _hint_speed(self, cpus: int) -> None:
        """A hint only where a setting the user chose still caps throughput."""
        now = self._scheduling
        per_second = now.rate[0] / now.rate[1] if now.rate and now.rate[1] else None
        nodes = self.workflow.resource_settings.nodes
        jobs = nodes if isinstance(nodes, int) and nodes < sys.maxsize else None
        hint = speed_hint(now.scheduler, jobs, per_second, cpus, now.subsample)
        if hint:
            self.logger.info(f"dask-slurm: hint: {hint}")

    # -- submission (Snakemake's scheduling thread) ---------------------------------

    def job_key(self, job: JobExecutorInterface) -> str:
        kind = f"group-{job.name}" if job.is_group() else job.name
        return f"{kind}-{job.jobid}-a{job.attempt}-{self._run_token}"

    def run_jobs(self, jobs: list[JobExecutorInterface]) -> None:
        """A scheduling round: each job is announced (``run_job_pre``) as Snakemake's
        default does, and submitted with the other jobs of its chunk."""
        if self._sigterm is None:
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
        if self._sigterm is None:
            self._first_round()
        self._submit_chunk([job])

    def _submit_chunk(self, jobs: list[JobExecutorInterface]) -> None:
        """Admit, build, register and submit ``jobs``; refuse, one by one, those that
        cannot run."""
        assert self._dispatcher is not None
        entries, refused = self._intake.take(jobs)
        stopping, lost = self._registry.hand_over(
            entries, self.report_job_submission, self._dispatcher.submit_many
        )
        if stopping and self._clock is not None:
            self._clock.not_started(key for info, _ in stopping if (key := info.external_jobid))
        for job_info, msg in refused + stopping:
            self.report_job_submission(job_info, register_job=False)
            self.report_job_error(job_info, msg=msg)
        self._report_lost(lost)

    def _report_lost(self, refusals: list[Refusal]) -> None:
        """Jobs announced to Snakemake that never reached Dask."""
        for job_info, msg in refusals:
            self.report_job_error(job_info, msg=msg)

    def print_job_error(self, job_info: SubmittedJobInfo, msg: Any = None, **kwargs: Any) -> None:
        # The base class appends "see the cluster/cloud log" to every message; ours
        # already name the job's own log.
        if self._registry.is_quiet(job_info.external_jobid):
            return  # _fail_run said why, once for all of them
        if job_info.external_jobid is not None:
            kwargs["external_jobid"] = job_info.external_jobid
        job = job_info.job
        if job.is_group() and msg:
            # Snakemake's GroupJob.log_error (jobs.py:1498) drops ``msg``: say it first.
            self.logger.error(f"Error in group {job.groupid}: {str(msg).rstrip()}")
        job.log_error(msg, **kwargs)

    # -- stopping every job at once ----------------------------------------------------

    def _install_sigterm_handler(self) -> None:
        """On SIGTERM (SLURM's time limit), stop running jobs, then let Snakemake end.

        Snakemake's own handler (installed after this executor is created, hence the lazy
        install) only stops scheduling and waits for running jobs, which at a time limit
        would outlast SLURM's KillWait. The handler itself only sets an event: it runs on
        the main thread, possibly while that thread holds Snakemake's scheduler lock, which
        Snakemake's handler takes. A watcher thread does the work, then calls it.
        """
        self._sigterm = threading.Event()
        if threading.current_thread() is not threading.main_thread():
            return
        previous = signal.getsignal(signal.SIGTERM)
        event = self._sigterm

        def watch() -> None:
            event.wait()
            self.logger.warning("dask-slurm: SIGTERM received: stopping running jobs")
            keys = self._registry.begin_stop("Snakemake received SIGTERM (e.g. SLURM's time limit)")
            if callable(previous):  # Snakemake: schedule nothing more
                previous(signal.SIGTERM, None)
            self._stop_jobs(keys)

        threading.Thread(target=watch, name="dask-slurm-sigterm", daemon=True).start()
        signal.signal(signal.SIGTERM, lambda signum, frame: event.set())

    def _stop_jobs(self, keys: list[str]) -> None:
        """Kill those jobs; each is then reported failed (blocks a few seconds)."""
        if self._dispatcher is None or self._source is None:
            return
        if self._source.scheduler_lost():
            self._source.stop_workers()  # their supervisors end the jobs
        else:
            self._dispatcher.stop(keys)

    # -- completion (the status thread) ----------------------------------------------

    def _wake(self) -> None:
        loop, event = self._wake_loop, self._wake_event
        if loop is not None and event is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed meanwhile: nobody to wake
                loop.call_soon_threadsafe(event.set)

    async def sleep(self) -> None:
        if self._wake_event is None:
            self._wake_event = asyncio.Event()
            self._wake_loop = asyncio.get_running_loop()
        # STATUS_INTERVAL, not next_seconds_between_status_checks: the base class starts
        # this loop before __post_init__ runs, so the first sleep would read Snakemake's
        # default (10 s) and a cluster broken early would go unnoticed that long.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake_event.wait(), STATUS_INTERVAL)
        self._wake_event.clear()

    async def check_active_jobs(
        self, active_jobs: list[SubmittedJobInfo]
    ) -> AsyncGenerator[SubmittedJobInfo, None]:
        # The base class's list is not used: completions come from Dask's events, so
        # each round costs O(finished jobs), not O(running jobs). Nothing is yielded.
        dispatcher = self._dispatcher
        if dispatcher is not None:
            self._check_cluster()
            for finished in dispatcher.drain():
                self._report(finished)
        for _ in ():
            yield _

    def _check_cluster(self, force: bool = False) -> None:
        """At most twice a second (or now, with ``force``): whether the cluster can still
        run jobs; if not, stop the run (:meth:`_fail_run`)."""
        now = time.monotonic()
        source, registry = self._source, self._registry
        if registry.fatal or source is None or self._dispatcher is None:
            return
        if not force and (now < self._next_health_check or registry.stop_reason):
            return
        self._next_health_check = now + HEALTH_CHECK_INTERVAL
        problem = None
        growing = self._worker_jobs is not None and self._worker_jobs.active()
        if not source.scheduler_lost() and self._dispatcher.worker_count == 0 and not growing:
            # no worker left says more than "every worker process ended"
            self._no_workers_since = self._no_workers_since or now
            problem = no_worker_problem(
                now - self._no_workers_since,
                source.restarts_workers,
                self.config.startup_timeout,
                source.deaths(),
                registry.logs,
            )
        else:
            self._no_workers_since = None
        problem = problem or source.problem()
        if problem:
            self._start_fail_run(f"the Dask cluster broke: {problem}")

    def _report(self, finished: Finished) -> None:
        if timing.ON:
            timing.record("reporting", finished.key, time.time())
            self._report_now(finished)
            timing.record("told", finished.key, finished.ok, time.time())
        else:
            self._report_now(finished)

    def _report_now(self, finished: Finished) -> None:
        registry = self._registry
        job_info = registry.get(finished.key)
        if job_info is None:  # killed and forgotten during cancellation
            return
        if finished.ok:
            registry.pop(finished.key)
            if self._clock is not None:
                self._clock.learn(job_info.job.name, finished.seconds)
            self.report_job_success(job_info)
            return
        if registry.fatal:
            return  # _fail_run reports it, once its processes are gone, with all others
        if finished.lost_on is not None:
            assert self._recovery is not None
            self._recovery.lost(finished.key, finished.lost_on)  # stays registered
            return
        if self._on_worker_job(finished) and not registry.stop_reason:
            # It may have failed because its worker job was ending (scancel, its time
            # limit): then it was killed with it, and runs again elsewhere.
            assert self._recovery is not None
            noticed = time.time()
            self._recovery.call(lambda: self._report_unless_worker_job_ended(finished, noticed))
            return
        if finished.outcome is None:
            # Cancelled, or lost with the scheduler: its processes may still run. If the
            # cluster broke, _fail_run reports it once they are gone.
            self._check_cluster(force=True)
            if registry.fatal:
                return
        elif finished.outcome.returncode < 0 and not registry.stop_reason:
            # Killed by a signal the plugin did not send: SLURM signals every process of
            # an allocation it ends, so ask it first (on the recovery thread), and such
            # jobs are then reported with the one message for the whole run.
            assert self._recovery is not None
            self._recovery.call(lambda: self._report_unless_ended(finished))
            return
        self._report_failure(finished)

    def _report_unless_ended(self, finished: Finished) -> None:
        """(Recovery thread) A job killed by a signal the plugin did not send."""
        self._on_worker_removed()  # fails the run if SLURM ended the allocation
        if not self._registry.fatal:
            self._report_failure(finished)

    def _on_worker_job(self, finished: Finished) -> bool:
        on = finished.on
        return self._worker_jobs is not None and on is not None and self._worker_jobs.owns(on.name)

    def _report_unless_worker_job_ended(self, finished: Finished, noticed: float) -> None:
        """(Recovery thread) A job that failed on a worker job's worker: lost with its
        worker job if that job is ending, else an ordinary failure."""
        assert self._worker_jobs is not None and self._recovery is not None and finished.on
        if self._worker_jobs.ending(finished.on.name, noticed):
            self.logger.info(
                f"dask-slurm: job {finished.key} failed as its worker job ended under it: "
                "it runs again elsewhere once its processes are gone"
            )
            self._recovery.lost(finished.key, finished.on)
        else:
            self._report_failure(finished)

    def _report_failure(self, finished: Finished) -> None:
        job_info = self._registry.pop(finished.key)
        if job_info is None:
            return
        aux = job_info.aux or {}
        stop = self._registry.stop_reason
        if stop and finished.outcome is None:
            finished = Finished(finished.key, False, problem=f"stopped: {stop}")
        msg = failure_message(job_info.job, finished, aux.get("way", "?"), aux.get("log", "?"))
        self.report_job_error(job_info, msg=msg, aux_logs=[aux.get("log")])

    # -- the cluster broke -----------------------------------------------------------

    def _start_fail_run(self, reason: str) -> None:
        if self._registry.begin_fatal(reason):
            threading.Thread(target=self._fail_run, args=(reason,), daemon=True).start()

    def _fail_run(self, reason: str) -> None:
        """Stop every job, then fail each, with one message for all of them.

        The jobs are failed only once their processes are gone (the workers stopped,
        whose supervisors end them), so that Snakemake's removal of their outputs is
        final: no job left running can write them back.
        """
        assert self._source is not None and self._dispatcher is not None
        self.logger.error(f"dask-slurm: {reason}")
        keys = self._registry.keys()
        if keys and not self._source.scheduler_lost():
            self._dispatcher.stop(keys)
        self._source.stop_workers()
        if self._worker_jobs is not None:  # their supervisors end their jobs, SLURM the rest
            self._worker_jobs.close()
        left = self._registry.take_all(reason, quiet=True)
        if left:
            self.logger.error(
                f"dask-slurm: stopping the run; the {len(left)} job(s) it still had, all "
                f"ended now, fail: {counts_by_rule([i.job for i in left.values()])}. Run the "
                "same command again (in a new allocation if this one ended): Snakemake "
                "redoes only what is missing."
            )
        for job_info in left.values():
            self.report_job_error(job_info, msg=f"stopped: {reason}")

    # -- a worker died ---------------------------------------------------------------

    def _on_removed(self) -> None:
        """A worker left the scheduler unexpectedly (Dask's event thread)."""
        self._wake()
        if self._recovery is not None:
            self._recovery.worker_removed()

    def _on_worker_removed(self) -> None:
        """(Recovery thread) Did the allocation end under the workers?"""
        if self._source is not None and not self._registry.fatal:
            problem = self._source.allocation_problem()
            if problem:
                self._start_fail_run(f"the Dask cluster broke: {problem}")

    def _on_gone(self, worker: WorkerRef, keys: list[str], gone: Gone | None) -> None:
        """(Recovery thread) The jobs of a dead worker: their processes are gone (or
        could not be ended): run each again elsewhere, or fail it."""
        self._on_worker_removed()
        self._check_cluster(force=True)  # no worker left to run them again?
        for key in keys:
            job_info = self._registry.get(key)
            if job_info is None or self._registry.fatal:  # cancelled, or left to _fail_run
                continue
            aux = job_info.aux or {}
            verdict = decide(
                job_label(job_info.job),
                key,
                worker.name,
                gone,
                aux.setdefault("lost_on", []),
                self._registry.stop_reason,
            )
            if verdict.rerun:
                self.logger.info(f"dask-slurm: {verdict.message}")
                self._rerun(key, job_info)
            elif self._registry.pop(key) is not None:
                self.report_job_error(job_info, msg=verdict.message)

    def _rerun(self, key: str, job_info: SubmittedJobInfo) -> None:
        """Run a lost job again, as the same Snakemake attempt, under a new task key,
        after removing what its dead copy wrote."""
        assert self._dispatcher is not None
        job, aux = job_info.job, job_info.aux or {}
        spec: TaskSpec = aux["spec"]
        reruns = aux["reruns"] = aux.get("reruns", 0) + 1
        base = aux.setdefault("key", key)
        log = aux.setdefault("first_log", spec.log_path).removesuffix(".log")
        new = dataclasses.replace(
            spec, key=f"{base}-r{reruns}", log_path=f"{log}.rerun{reruns}.log"
        )
        try:
            self.workflow.async_run(job.remove_existing_output())
            if aux.get("way") == "direct":  # the general way's own Snakemake prepares
                for f in (*job.output, *job.log):
                    f.prepare()
        except Exception as e:
            if self._registry.pop(key) is not None:
                self.report_job_error(
                    job_info, msg=f"{job_label(job)} could not be run again: {e}\n"
                )
            return
        aux.update(spec=new, log=new.log_path)
        outcome = self._registry.replace(
            key, job_info, new, aux["request"], self._dispatcher.submit_many
        )
        if isinstance(outcome, list):
            self._report_lost(outcome)
        elif outcome and self._registry.pop(key) is not None:
            self.report_job_error(job_info, msg=f"{job_label(job)} was not run again: {outcome}\n")

    # -- ending ------------------------------------------------------------------------

    def cancel_jobs(self, active_jobs: list[SubmittedJobInfo]) -> None:
        # Our own registry, not ``active_jobs``: the base class empties that list while
        # a status round runs, so a Ctrl-C at that moment would miss jobs.
        keys = list(self._registry.take_all("the workflow was cancelled"))
        if self._source is not None and self._source.scheduler_lost():
            self._source.stop_workers()  # their supervisors end the jobs
        elif self._dispatcher is not None:
            self._dispatcher.kill(keys)

    def shutdown(self) -> None:
        began = time.time()
        try:
            with self.lock:
                self.wait = False
            self._wake()  # the status thread may sit in sleep() for a second
            super().shutdown()
        finally:
            self.close_cluster()
            landed = self._clock.summary(shlex.join(sys.argv)) if self._clock else None
            if landed:
                self.logger.warning(f"dask-slurm: {landed}")
            if timing.ON:
                timing.record("shutdown", began, time.time())

    def close_cluster(self) -> None:
        if self._closed or self._source is None:
            return
        started = time.monotonic()
        try:
            if self._clock is not None:
                self._clock.watch.close()
            if self._recovery is not None:
                self._recovery.close()
            if self._worker_jobs is not None:
                self._worker_jobs.stop()
            keys = self._registry.keys()
            if keys and self._dispatcher is not None and not self._source.scheduler_lost():
                self._dispatcher.kill(keys)
        finally:
            try:
                self._source.close()
            finally:
                if self._worker_jobs is not None:
                    self._worker_jobs.close()
                    line = self._worker_jobs.summary()
                    if line:
                        self.logger.info(f"dask-slurm: {line}")
            self._closed = True
            if timing.ON:
                timing.record("cluster_close", getattr(self._source, "teardown_seconds", 0.0))
        self.logger.info(f"dask-slurm: Dask cluster closed in {time.monotonic() - started:.1f} s")
