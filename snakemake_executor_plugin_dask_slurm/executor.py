"""The Snakemake executor: settings in, calls into the layers below.

Threading (see docs/architecture.md): ``run_jobs`` runs on Snakemake's scheduling thread
and must not block; ``check_active_jobs`` and ``sleep`` run on the base class's status
thread, which starts *before* ``__post_init__`` — so everything they touch is set in
``__init__`` before the base class starts that thread. Stopping every job at once (SIGTERM,
a broken cluster) happens on a thread of its own, under ``_stop_lock`` so that no job can
be submitted after the stop took its snapshot of the running jobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo
from snakemake_interface_executor_plugins.executors.remote import RemoteExecutor
from snakemake_interface_executor_plugins.jobs import JobExecutorInterface

from .cluster import ClusterSource
from .dispatch import Dispatcher, SubmitFailed
from .job_commands import JobCommandBuilder
from .reporting import failure_message, job_label, speed_hint
from .resources import Capacity, job_request, unsatisfiable_message
from .sources import make_source
from .tasks import Finished, TaskSpec
from .validation import RunConfig, resolve

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
        self._jobs: dict[str, SubmittedJobInfo] = {}
        self._wake_loop: asyncio.AbstractEventLoop | None = None
        self._wake_event: asyncio.Event | None = None
        self._source: ClusterSource | None = None
        self._closed = False
        self._sigterm: threading.Event | None = None
        self._stop_lock = threading.Lock()
        self._stop_reason: str | None = None
        self._next_health_check = 0.0
        super().__init__(workflow, logger)

    def __post_init__(self) -> None:
        settings = self.workflow.executor_settings
        workdir = Path(self.workflow.workdir_init)
        self.config: RunConfig = resolve(settings, os.environ, workdir)
        self._run_token = uuid.uuid4().hex[:8]
        log_dir = self.config.run_dir / "logs"
        self._builder = JobCommandBuilder(
            workflow=self.workflow,
            workdir=str(workdir),
            log_root=str(log_dir / "jobs"),
            base_env=self.envvars(),
            direct_shell=self.config.direct_shell,
            format_job_exec=self.format_job_exec,
            run_async=self.workflow.async_run,
        )
        source = make_source(self.config, log_dir, self.logger)
        self.logger.info(f"dask-slurm: {self.config.cluster} ({self.config.cluster_reason})")
        self.logger.info(f"dask-slurm: starting {source.description}")
        client = source.start()  # stops what it started if it fails
        try:
            offers = [
                w.get("resources", {})
                for w in client.scheduler_info(n_workers=-1)["workers"].values()
            ]
            self._capacity = Capacity.from_workers(offers)
            self._total_cpus = int(sum(offer.get("cpus", 0) for offer in offers))
            self._advertised = self._capacity.advertised
            for line in source.summary():
                self.logger.info(f"dask-slurm: {line}")
            self._hint_speed()
        except BaseException:
            source.close()
            raise
        self._source = source
        self._dispatcher = Dispatcher(client, self._wake)

    def _hint_speed(self) -> None:
        scheduling = self.workflow.scheduling_settings
        rate = scheduling.max_jobs_per_timespan
        per_second = rate.max_jobs / rate.timespan if rate and rate.timespan else None
        nodes = self.workflow.resource_settings.nodes
        jobs = nodes if isinstance(nodes, int) and nodes < sys.maxsize else None
        hint = speed_hint(
            scheduling.scheduler, jobs, per_second, self._total_cpus, scheduling.subsample
        )
        if hint:
            self.logger.info(f"dask-slurm: hint: {hint}")

    def additional_general_args(self) -> str:
        # A spawned Snakemake otherwise waits ~1 s at exit for its job-rate limiter's
        # timer; the outer Snakemake already rate-limits submissions.
        return "--max-jobs-per-timespan 100000/0s"

    # -- submission (Snakemake's scheduling thread) ---------------------------------

    def job_key(self, job: JobExecutorInterface) -> str:
        kind = f"group-{job.name}" if job.is_group() else job.name
        return f"{kind}-{job.jobid}-a{job.attempt}-{self._run_token}"

    def run_jobs(self, jobs: list[JobExecutorInterface]) -> None:
        """A scheduling round: each job is announced (``run_job_pre``) as Snakemake's
        default does, and submitted with the other jobs of its chunk."""
        if self._sigterm is None:
            self._install_sigterm_handler()
        chunk: list[JobExecutorInterface] = []
        flush_at = 0.0
        for job in jobs:
            self.run_job_pre(job)
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
            self._install_sigterm_handler()
        self._submit_chunk([job])

    def _submit_chunk(self, jobs: list[JobExecutorInterface]) -> None:
        """Build, register and submit ``jobs``; refuse, one by one, those that cannot run."""
        refused: list[tuple[SubmittedJobInfo, str]] = []
        accepted: list[tuple[SubmittedJobInfo, dict[str, float]]] = []
        for job in jobs:
            job_info = SubmittedJobInfo(job, external_jobid=self.job_key(job))
            request = job_request(job.threads, job.resources, self._advertised)
            if self._capacity.fits(request):
                accepted.append((job_info, request))
            else:
                msg = unsatisfiable_message(job_label(job), request, self._capacity)
                refused.append((job_info, msg))
        built = self._builder.build_many([(info.job, info.external_jobid) for info, _ in accepted])
        tasks: list[tuple[TaskSpec, dict[str, float]]] = []
        with self._stop_lock:
            for (job_info, request), item in zip(accepted, built, strict=True):
                if isinstance(item, Exception):
                    msg = f"{job_label(job_info.job)} could not be prepared: {item}\n"
                    refused.append((job_info, msg))
                    continue
                spec, way = item
                job_info.aux = {"way": way, "log": spec.log_path}
                if self._stop_reason:
                    msg = f"{job_label(job_info.job)} was not started: {self._stop_reason}\n"
                    refused.append((job_info, msg))
                    continue
                self._jobs[spec.key] = job_info
                self.report_job_submission(job_info)
                tasks.append((spec, request))
            lost = self._hand_over(tasks)
        for job_info, msg in refused:
            self._refuse(job_info, msg)
        for job_info, msg in lost:
            self.report_job_error(job_info, msg=msg)

    def _hand_over(
        self, tasks: list[tuple[TaskSpec, dict[str, float]]]
    ) -> list[tuple[SubmittedJobInfo, str]]:
        """Submit registered jobs to Dask (under ``_stop_lock``); if Dask refuses them (the
        client lost its scheduler), unregister them and return them with the reason."""
        if not tasks:
            return []
        assert self._dispatcher is not None
        try:
            self._dispatcher.submit_many(tasks)
            return []
        except SubmitFailed as e:
            keys, error = e.keys, str(e)
        reason = (
            f"could not be handed to the Dask scheduler ({error}); the scheduler has "
            f"probably stopped: see its log in {self.config.run_dir / 'logs'}"
        )
        lost = []
        for key in keys:
            job_info = self._jobs.pop(key, None)
            if job_info is not None:
                lost.append((job_info, f"{job_label(job_info.job)} {reason}\n"))
        return lost

    def _refuse(self, job_info: SubmittedJobInfo, msg: str) -> None:
        self.report_job_submission(job_info, register_job=False)
        self.report_job_error(job_info, msg=msg)

    def print_job_error(self, job_info: SubmittedJobInfo, msg: Any = None, **kwargs: Any) -> None:
        # The base class appends "see the cluster/cloud log" to every message; ours
        # already name the job's own log.
        if job_info.external_jobid is not None:
            kwargs["external_jobid"] = job_info.external_jobid
        job_info.job.log_error(msg, **kwargs)

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
            keys = self._begin_stop("Snakemake received SIGTERM (e.g. SLURM's time limit)")
            if callable(previous):  # Snakemake: schedule nothing more
                previous(signal.SIGTERM, None)
            self._finish_stop(keys)

        threading.Thread(target=watch, name="dask-slurm-sigterm", daemon=True).start()
        signal.signal(signal.SIGTERM, lambda signum, frame: event.set())

    def _begin_stop(self, reason: str) -> list[str]:
        """Refuse new jobs from now on; the keys of every job submitted until now."""
        with self._stop_lock:
            if self._stop_reason is None:
                self._stop_reason = reason
            return list(self._jobs)

    def _finish_stop(self, keys: list[str]) -> None:
        """Kill those jobs; each is then reported failed (blocks a few seconds)."""
        if self._dispatcher is not None:
            self._dispatcher.stop(keys)

    def _stop_all(self, reason: str) -> None:
        self._finish_stop(self._begin_stop(reason))

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
        # The base class's list is not used: completions come from Dask's callbacks, so
        # each round costs O(finished jobs), not O(running jobs). Nothing is yielded.
        dispatcher = self._dispatcher
        if dispatcher is not None:
            self._check_cluster()
            for finished in dispatcher.drain():
                self._report(finished)
        for _ in ():
            yield _

    def _check_cluster(self) -> None:
        """At most twice a second: if a process of the cluster died, fail what it ran."""
        now = time.monotonic()
        if now < self._next_health_check or self._stop_reason or self._source is None:
            return
        self._next_health_check = now + HEALTH_CHECK_INTERVAL
        problem = self._source.problem()
        if problem:
            reason = f"the Dask cluster broke: {problem}"
            self.logger.error(f"dask-slurm: {reason}")
            threading.Thread(target=self._stop_all, args=(reason,), daemon=True).start()

    def _report(self, finished: Finished) -> None:
        job_info = self._jobs.pop(finished.key, None)
        if job_info is None:  # killed and forgotten during cancellation
            return
        if finished.ok:
            self.report_job_success(job_info)
            return
        aux = job_info.aux or {}
        if self._stop_reason and finished.outcome is None:
            finished = Finished(finished.key, False, problem=f"stopped: {self._stop_reason}")
        msg = failure_message(job_info.job, finished, aux.get("way", "?"), aux.get("log", "?"))
        self.report_job_error(job_info, msg=msg, aux_logs=[aux.get("log")])

    # -- ending ------------------------------------------------------------------------

    def cancel_jobs(self, active_jobs: list[SubmittedJobInfo]) -> None:
        # Our own registry, not ``active_jobs``: the base class empties that list while
        # a status round runs, so a Ctrl-C at that moment would miss jobs.
        with self._stop_lock:
            self._stop_reason = self._stop_reason or "the workflow was cancelled"
            keys = list(self._jobs)
            self._jobs.clear()
        if self._dispatcher is not None:
            self._dispatcher.kill(keys)

    def shutdown(self) -> None:
        try:
            with self.lock:
                self.wait = False
            self._wake()  # the status thread may sit in sleep() for a second
            super().shutdown()
        finally:
            self.close_cluster()

    def close_cluster(self) -> None:
        if self._closed or self._source is None:
            return
        started = time.monotonic()
        try:
            if self._jobs and self._dispatcher is not None:
                self._dispatcher.kill(list(self._jobs))
        finally:
            self._source.close()
            self._closed = True
        self.logger.info(f"dask-slurm: Dask cluster closed in {time.monotonic() - started:.1f} s")
