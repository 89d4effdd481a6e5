"""The Snakemake executor: settings in, calls into the layers below.

Threading (see docs/architecture.md): ``run_job`` runs on Snakemake's scheduling thread
and must not block; ``check_active_jobs`` and ``sleep`` run on the base class's status
thread, which starts *before* ``__post_init__`` — so everything they touch is set in
``__init__`` before the base class starts that thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
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
from .dispatch import Dispatcher, Finished
from .job_commands import JobCommandBuilder
from .reporting import failure_message, job_label
from .resources import Capacity, job_request, unsatisfiable_message
from .sources import make_source
from .validation import RunConfig, resolve

#: Fallback interval of the status loop; completions wake it at once.
STATUS_INTERVAL = 1.0
#: Seconds between checks that the cluster's processes are still alive.
HEALTH_CHECK_INTERVAL = 0.5


class Executor(RemoteExecutor):
    def __init__(self, workflow: Any, logger: Any) -> None:
        # Set before the base class starts the status thread, which may use them at once.
        self._dispatcher: Dispatcher | None = None
        self._jobs: dict[str, SubmittedJobInfo] = {}
        self._wake_loop: asyncio.AbstractEventLoop | None = None
        self._wake_event: asyncio.Event | None = None
        self._source: ClusterSource | None = None
        self._closed = False
        self._sigterm_installed = False
        self._stop_reason: str | None = None
        self._next_health_check = 0.0
        super().__init__(workflow, logger)

    def __post_init__(self) -> None:
        settings = self.workflow.executor_settings
        workdir = Path(self.workflow.workdir_init)
        self.config: RunConfig = resolve(settings, os.environ, workdir)
        self.next_seconds_between_status_checks = STATUS_INTERVAL
        self._run_token = uuid.uuid4().hex[:8]
        log_dir = self.config.run_dir / "logs"
        self._builder = JobCommandBuilder(
            workflow=self.workflow,
            workdir=str(workdir),
            log_root=str(log_dir / "jobs"),
            base_env=self.envvars(),
            direct_shell=self.config.direct_shell,
            format_job_exec=self.format_job_exec,
            prepare=lambda job: self.workflow.async_run(job.prepare()),
        )
        self._source = make_source(self.config, log_dir, self.logger)
        self.logger.info(f"dask-slurm: {self.config.cluster} ({self.config.cluster_reason})")
        self.logger.info(f"dask-slurm: starting {self._source.description}")
        client = self._source.start()
        self._capacity = Capacity.from_workers(
            w.get("resources", {}) for w in client.scheduler_info(n_workers=-1)["workers"].values()
        )
        self._advertised = self._capacity.advertised
        self._dispatcher = Dispatcher(client, self._wake)
        for line in self._source.summary():
            self.logger.info(f"dask-slurm: {line}")

    def additional_general_args(self) -> str:
        # A spawned Snakemake otherwise waits ~1 s at exit for its job-rate limiter's
        # timer; the outer Snakemake already rate-limits submissions.
        return "--max-jobs-per-timespan 100000/0s"

    # -- submission (Snakemake's scheduling thread) ---------------------------------

    def job_key(self, job: JobExecutorInterface) -> str:
        kind = f"group-{job.name}" if job.is_group() else job.name
        return f"{kind}-{job.jobid}-a{job.attempt}-{self._run_token}"

    def run_job(self, job: JobExecutorInterface) -> None:
        if not self._sigterm_installed:
            self._install_sigterm_handler()
        key = self.job_key(job)
        job_info = SubmittedJobInfo(job, external_jobid=key)
        if self._stop_reason:
            self.report_job_submission(job_info, register_job=False)
            self.report_job_error(
                job_info, msg=f"{job_label(job)} was not started: {self._stop_reason}\n"
            )
            return
        request = job_request(job.threads, job.resources, self._advertised)
        if not self._capacity.fits(request):
            self.report_job_submission(job_info, register_job=False)
            self.report_job_error(
                job_info, msg=unsatisfiable_message(job_label(job), request, self._capacity)
            )
            return
        try:
            spec, way = self._builder.build(job, key)
        except Exception as e:
            self.report_job_submission(job_info, register_job=False)
            self.report_job_error(job_info, msg=f"{job_label(job)} could not be prepared: {e}")
            return
        job_info.aux = {"way": way, "log": spec.log_path}
        self._jobs[key] = job_info
        self.report_job_submission(job_info)
        assert self._dispatcher is not None
        self._dispatcher.submit(spec, request)

    def _install_sigterm_handler(self) -> None:
        """On SIGTERM (SLURM's time limit), stop running jobs, then let Snakemake end.

        Snakemake's own handler (installed after this executor is created, hence the lazy
        install) only stops scheduling and waits for running jobs, which at a time limit
        would outlast SLURM's KillWait. Ours kills the jobs first, off the signal
        handler's thread, so Snakemake sees them fail and shuts down within seconds.
        """
        self._sigterm_installed = True
        if threading.current_thread() is not threading.main_thread():
            return
        previous = signal.getsignal(signal.SIGTERM)

        def on_sigterm(signum: int, frame: Any) -> None:
            self.logger.warning("dask-slurm: SIGTERM received: stopping running jobs")
            self._stop_reason = "Snakemake received SIGTERM (e.g. SLURM's time limit)"
            threading.Thread(target=self._kill_running, daemon=True).start()
            if callable(previous):
                previous(signum, frame)

        signal.signal(signal.SIGTERM, on_sigterm)

    def _kill_running(self) -> None:
        if self._dispatcher is not None:
            self._dispatcher.kill(list(self._jobs))

    # -- completion (the status thread) ----------------------------------------------

    def _wake(self) -> None:
        loop, event = self._wake_loop, self._wake_event
        if loop is not None and event is not None:
            loop.call_soon_threadsafe(event.set)

    async def sleep(self) -> None:
        if self._wake_event is None:
            self._wake_event = asyncio.Event()
            self._wake_loop = asyncio.get_running_loop()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake_event.wait(), self.next_seconds_between_status_checks)
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
        if now < self._next_health_check:
            return
        self._next_health_check = now + HEALTH_CHECK_INTERVAL
        if self._stop_reason is None and self._source is not None:
            problem = self._source.problem()
            if problem:
                self._stop_reason = f"the Dask cluster broke: {problem}"
                self.logger.error(f"dask-slurm: {self._stop_reason}")
                self._kill_running()

    def _report(self, finished: Finished) -> None:
        job_info = self._jobs.pop(finished.key, None)
        if job_info is None:  # killed and forgotten during cancellation
            return
        if finished.ok:
            self.report_job_success(job_info)
            return
        aux = job_info.aux or {}
        if self._stop_reason and finished.outcome is None:
            finished = Finished(finished.key, False, problem=f"stopped because {self._stop_reason}")
        msg = failure_message(job_info.job, finished, aux.get("way", "?"), aux.get("log", "?"))
        self.report_job_error(job_info, msg=msg, aux_logs=[aux.get("log")])

    # -- ending ------------------------------------------------------------------------

    def cancel_jobs(self, active_jobs: list[SubmittedJobInfo]) -> None:
        # Our own registry, not ``active_jobs``: the base class empties that list while
        # a status round runs, so a Ctrl-C at that moment would miss jobs.
        self._kill_running()
        self._jobs.clear()

    def shutdown(self) -> None:
        super().shutdown()
        self.close_cluster()

    def close_cluster(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._jobs:
            self._kill_running()
        if self._source is not None:
            started = time.monotonic()
            self._source.close()
            self.logger.info(
                f"dask-slurm: Dask cluster closed in {time.monotonic() - started:.1f} s"
            )
