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
import dataclasses
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

from .clusters.base import ClusterSource
from .clusters.choose import check_run_dir, make_source
from .config import RunConfig, resolve
from .dispatch.admission import (
    GPU_RESOURCE_NAMES,
    Capacity,
    admit,
    job_request,
    unsatisfiable_message,
)
from .dispatch.dispatcher import Dispatcher, SubmitFailed
from .dispatch.job_commands import JobCommandBuilder, requote_job_args
from .dispatch.recovery import Gone, Recovery
from .dispatch.scheduling import (
    RATE_FLAGS,
    SCHEDULER_FLAGS,
    SUBSAMPLE_FLAGS,
    Given,
    Plan,
    flag_given,
    plan,
)
from .report.hints import speed_hint
from .report.messages import (
    LOST_TWICE,
    failure_message,
    job_label,
    lost_job_message,
    unconfirmed_verdict,
)
from .worker.tasks import Finished, LostWorker, TaskSpec

#: Fallback interval of the status loop; completions wake it at once.
STATUS_INTERVAL = 1.0
#: Seconds between checks that the cluster's processes are still alive.
HEALTH_CHECK_INTERVAL = 0.5
#: A scheduling round goes to Dask in chunks: one graph update per chunk (and resource
#: request), sent when it holds CHUNK_JOBS jobs or its first job has waited CHUNK_SECONDS,
#: so that the first tasks of a large round start at once.
CHUNK_JOBS = 64
CHUNK_SECONDS = 0.02
#: A job whose worker died while it ran this often is not run again.
MAX_LOSSES = 2
#: Seconds to wait, when no worker is left, for the supervisors' word on how they died.
DEATH_RECORD_WAIT = 2.0


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
        #: Set when the cluster broke: every job still registered then fails, once its
        #: processes are gone (see _fail_run).
        self._fatal: str | None = None
        self._quiet: set[str] = set()  # jobs whose failure _fail_run already explained
        self._recovery: Recovery | None = None
        self._no_workers_since: float | None = None
        self._capped_rules: set[str] = set()
        self._scheduling = Given(None, "greedy", None)  # what Snakemake runs with
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
        self.logger.info(f"dask-slurm: {self.config.cluster} ({self.config.cluster_reason})")
        for warning in self.config.warnings:
            self.logger.warning(f"dask-slurm: {warning}")
        check_run_dir(self.config.run_dir)
        # Built (settings, allocation, preflight) now; started at the first run_jobs, so a
        # run with nothing to do (Snakemake never calls shutdown() then) starts nothing.
        cores = self.workflow.resource_settings.cores
        self._given_cores = (
            cores if isinstance(cores, int) and not isinstance(cores, bool) else None
        )
        self._pending_source: ClusterSource | None = make_source(
            self.config, log_dir, self.logger, self._given_cores
        )
        self._local_cores: int | None = None
        if self.config.cluster == "local":
            self._cap_like_local_executor()

    def _cap_like_local_executor(self) -> None:
        """Local mode: scale threads down to what one local worker has, as Snakemake's
        local executor does with --cores (rules.py expand_resources constrains _cores by
        workflow.global_resources["_cores"]; only when the user gave no --cores). Runs
        before the first job selection, which re-evaluates every job's resources."""
        from .clusters.choose import local_cpus
        from .clusters.local import local_layout

        cpus, _ = local_cpus(self.config, self._given_cores)
        per_worker = local_layout(cpus, self.config.workers)[1]
        if self._given_cores is None:
            self.workflow.global_resources["_cores"] = per_worker
            self._local_cores = per_worker
            self.logger.info(
                f"dask-slurm: local mode: rules claiming more than {per_worker} threads "
                "will be scaled down (as with --cores)"
            )

    @property
    def cores(self) -> Any:
        # What a general-way job's own Snakemake gets as --cores (real.py:101).
        return self._local_cores if self._local_cores else super().cores

    def _ensure_cluster(self) -> None:
        """Start the Dask cluster if this is the first scheduling round (main thread)."""
        source = self._pending_source
        if self._dispatcher is not None or source is None:
            return
        self._pending_source = None
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
        self._recovery = Recovery(
            source.record_dir, source.sweep, self._on_gone, self._on_worker_removed
        )
        self._dispatcher = Dispatcher(client, self._wake, lambda _address: self._on_removed())

    def _tune_scheduling(self) -> None:
        """Once, at the first scheduling round: lift the Snakemake scheduling defaults the
        user did not choose (:mod:`.scheduling`), in Snakemake's job scheduler itself."""
        settings = self.workflow.scheduling_settings
        rate = settings.max_jobs_per_timespan
        given = Given(
            rate=(rate.max_jobs, float(rate.timespan)) if rate else None,
            scheduler=settings.scheduler,
            subsample=settings.subsample,
            rate_chosen=flag_given(sys.argv, RATE_FLAGS) or bool(settings.max_jobs_per_second),
            scheduler_chosen=flag_given(sys.argv, SCHEDULER_FLAGS),
            subsample_chosen=flag_given(sys.argv, SUBSAMPLE_FLAGS),
        )
        change = plan(given)
        scheduler = getattr(self.workflow, "scheduler", None)
        if change and scheduler is not None:
            apply_to_job_scheduler(scheduler, change)
            self.logger.info(f"dask-slurm: {change.describe(given)}")
        self._scheduling = change.effective(given) if scheduler is not None else given

    def _hint_speed(self) -> None:
        """A hint only where a setting the user chose still caps throughput."""
        now = self._scheduling
        per_second = now.rate[0] / now.rate[1] if now.rate and now.rate[1] else None
        nodes = self.workflow.resource_settings.nodes
        jobs = nodes if isinstance(nodes, int) and nodes < sys.maxsize else None
        hint = speed_hint(now.scheduler, jobs, per_second, self._total_cpus, now.subsample)
        if hint:
            self.logger.info(f"dask-slurm: hint: {hint}")

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

    # -- submission (Snakemake's scheduling thread) ---------------------------------

    def job_key(self, job: JobExecutorInterface) -> str:
        kind = f"group-{job.name}" if job.is_group() else job.name
        return f"{kind}-{job.jobid}-a{job.attempt}-{self._run_token}"

    def run_jobs(self, jobs: list[JobExecutorInterface]) -> None:
        """A scheduling round: each job is announced (``run_job_pre``) as Snakemake's
        default does, and submitted with the other jobs of its chunk."""
        if self._sigterm is None:
            self._install_sigterm_handler()
            self._tune_scheduling()
        self._ensure_cluster()
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
            self._tune_scheduling()
        self._ensure_cluster()
        self._submit_chunk([job])

    def _submit_chunk(self, jobs: list[JobExecutorInterface]) -> None:
        """Build, register and submit ``jobs``; refuse, one by one, those that cannot run."""
        refused: list[tuple[SubmittedJobInfo, str]] = []
        accepted: list[tuple[SubmittedJobInfo, dict[str, float]]] = []
        for job in jobs:
            job_info = SubmittedJobInfo(job, external_jobid=self.job_key(job))
            asked = job_request(job.threads, job.resources, self._advertised)
            admitted = admit(asked, self._capacity, cap=self.config.cluster == "local")
            if admitted is not None:
                request, capped = admitted
                if capped:
                    self._note_capped(job, asked, capped)
                accepted.append((job_info, request))
            else:
                msg = unsatisfiable_message(job_label(job), asked, self._capacity)
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
                # spec and request: to run it again if its worker dies under it
                job_info.aux = {"way": way, "log": spec.log_path, "spec": spec, "request": request}
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

    def _note_capped(self, job: JobExecutorInterface, asked: dict[str, float], capped: Any) -> None:
        """Once per rule: which of its requests local mode capped, and why."""
        if job.name in self._capped_rules:
            return
        self._capped_rules.add(job.name)
        parts = []
        for resource in capped:
            if resource in self._advertised:
                has = self._capacity.largest().get(resource, 0)
                parts.append(
                    f"{resource}={asked[resource]:g} is more than a local worker has ({has:g}), "
                    "so it gets a whole worker"
                )
            else:
                name = next(
                    (n for n in GPU_RESOURCE_NAMES if job.resources.get(n) == asked[resource]),
                    resource,
                )
                parts.append(
                    f"{name}={asked[resource]:g} is counted by Snakemake only (limit it with "
                    f"--resources {name}=N): the local workers have no GPUs"
                )
        self.logger.info(
            f"dask-slurm: rule {job.name}: {'; '.join(parts)}, as Snakemake's local executor "
            "would run it"
        )

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
        if job_info.external_jobid in self._quiet:
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
        if self._dispatcher is None or self._source is None:
            return
        if self._source.scheduler_lost():
            self._source.stop_workers()  # their supervisors end the jobs
        else:
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

    def _check_cluster(self, force: bool = False) -> None:
        """At most twice a second (or now, with ``force``): whether the cluster can still
        run jobs; if not, stop the run (:meth:`_fail_run`)."""
        now = time.monotonic()
        if self._fatal or self._source is None:
            return
        if not force and (now < self._next_health_check or self._stop_reason):
            return
        self._next_health_check = now + HEALTH_CHECK_INTERVAL
        if self._source.scheduler_lost():
            problem = self._source.problem()
        else:  # no worker left says more than "every worker process ended"
            problem = self._no_worker_problem(now) or self._source.problem()
        if problem:
            self._start_fail_run(f"the Dask cluster broke: {problem}")

    def _no_worker_problem(self, now: float) -> str | None:
        """No worker left: the end, unless dead workers are restarted (then after the
        start-up timeout without one)."""
        if self._dispatcher is None or self._dispatcher.worker_count > 0:
            self._no_workers_since = None
            return None
        if self._no_workers_since is None:
            self._no_workers_since = now
        waited = now - self._no_workers_since
        if self._source is not None and self._source.restarts_workers:
            if waited < self.config.startup_timeout:
                return None
            return f"no Dask worker has been alive for {waited:.0f} s"
        deaths = "; ".join(self._source.deaths()) if self._source else ""
        if not deaths and waited < DEATH_RECORD_WAIT:
            return None  # the supervisors are still ending the jobs: say how they died
        return (
            f"no Dask worker is left ({deaths or 'every worker died'}; nothing restarts "
            f"them: see the worker logs in {self.config.run_dir / 'logs'}; "
            "--dask-slurm-nanny restarts a worker that dies)"
        )

    def _report(self, finished: Finished) -> None:
        job_info = self._jobs.get(finished.key)
        if job_info is None:  # killed and forgotten during cancellation
            return
        if finished.ok:
            self._jobs.pop(finished.key, None)
            self.report_job_success(job_info)
            return
        if self._fatal:
            return  # _fail_run reports it, once its processes are gone, with all others
        if finished.lost_on is not None:
            assert self._recovery is not None
            self._recovery.lost(finished.key, finished.lost_on)  # stays registered
            return
        if finished.outcome is None:
            # Cancelled, or lost with the scheduler: its processes may still run. If the
            # cluster broke, _fail_run reports it once they are gone.
            self._check_cluster(force=True)
            if self._fatal:
                return
        elif self._killed_from_outside(finished) and self._recovery is not None:
            # SLURM signals every process of an allocation it ends: ask it first, so that
            # such jobs are reported with the one message for the whole run.
            self._recovery.call(lambda: self._report_unless_ended(finished))
            return
        self._report_failure(job_info, finished)

    def _killed_from_outside(self, finished: Finished) -> bool:
        outcome = finished.outcome
        return outcome is not None and outcome.returncode < 0 and not self._stop_reason

    def _report_unless_ended(self, finished: Finished) -> None:
        """(Recovery thread) A job killed by a signal the plugin did not send."""
        self._on_worker_removed()  # fails the run if SLURM ended the allocation
        with self._stop_lock:
            job_info = None if self._fatal else self._jobs.get(finished.key)
        if job_info is not None:
            self._report_failure(job_info, finished)

    def _report_failure(self, job_info: SubmittedJobInfo, finished: Finished) -> None:
        with self._stop_lock:
            if self._jobs.pop(finished.key, None) is None:
                return
        aux = job_info.aux or {}
        if self._stop_reason and finished.outcome is None:
            finished = Finished(finished.key, False, problem=f"stopped: {self._stop_reason}")
        msg = failure_message(job_info.job, finished, aux.get("way", "?"), aux.get("log", "?"))
        self.report_job_error(job_info, msg=msg, aux_logs=[aux.get("log")])

    # -- the cluster broke -----------------------------------------------------------

    def _start_fail_run(self, reason: str) -> None:
        with self._stop_lock:
            if self._fatal:
                return
            self._fatal = reason
            self._stop_reason = self._stop_reason or reason
        threading.Thread(target=self._fail_run, args=(reason,), daemon=True).start()

    def _fail_run(self, reason: str) -> None:
        """Stop every job, then fail each, with one message for all of them.

        The jobs are failed only once their processes are gone (the workers stopped,
        whose supervisors end them), so that Snakemake's removal of their outputs is
        final: no job left running can write them back.
        """
        assert self._source is not None and self._dispatcher is not None
        with self._stop_lock:
            keys = list(self._jobs)
        self.logger.error(f"dask-slurm: {reason}")
        if keys and not self._source.scheduler_lost():
            self._dispatcher.stop(keys)
        self._source.stop_workers()
        with self._stop_lock:
            left = dict(self._jobs)
            self._jobs.clear()
            self._quiet.update(left)
        if left:
            rules = sorted(job_label(info.job).split(" (")[0] for info in left.values())
            counts = ", ".join(f"{r} ({rules.count(r)})" for r in dict.fromkeys(rules))
            self.logger.error(
                f"dask-slurm: stopping the run; the {len(left)} job(s) it still had, all "
                f"ended now, fail: {counts}. Run the same command again (in a new "
                "allocation if this one ended): Snakemake redoes only what is missing."
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
        if self._source is not None and not self._fatal:
            problem = self._source.allocation_problem()
            if problem:
                self._start_fail_run(f"the Dask cluster broke: {problem}")

    def _on_gone(self, worker: LostWorker, keys: list[str], gone: Gone | None) -> None:
        """(Recovery thread) The jobs of a dead worker: their processes are gone (or
        could not be ended): run each again elsewhere, or fail it."""
        self._on_worker_removed()
        self._check_cluster(force=True)  # no worker left to run them again?
        for key in keys:
            with self._stop_lock:
                job_info = self._jobs.get(key)
                stop = self._stop_reason
            if job_info is None or self._fatal:  # cancelled, or left to _fail_run
                continue
            aux = job_info.aux or {}
            running = gone is not None and key in gone.record.get("jobs_left_running", ())
            if running:
                aux.setdefault("lost_on", []).append(worker.name)
            label = job_label(job_info.job)
            how = f"it {gone.worker_exit}, and {gone.how}" if gone else None
            if gone is None:
                verdict = unconfirmed_verdict(worker.name, key)
            elif stop:
                verdict = f"It is not run again: {stop}."
            elif len(aux.get("lost_on", ())) >= MAX_LOSSES:
                verdict = f"Its workers died under it on {', '.join(aux['lost_on'])}. {LOST_TWICE}"
            else:
                again = "Running it again on another worker."
                self.logger.info(
                    f"dask-slurm: {lost_job_message(label, worker.name, running, how, again)}"
                )
                self._rerun(key, job_info)
                continue
            self._fail(key, job_info, lost_job_message(label, worker.name, running, how, verdict))

    def _fail(self, key: str, job_info: SubmittedJobInfo, msg: str) -> None:
        with self._stop_lock:
            if self._jobs.pop(key, None) is None:
                return
        self.report_job_error(job_info, msg=msg)

    def _rerun(self, key: str, job_info: SubmittedJobInfo) -> None:
        """Run a lost job again, as the same Snakemake attempt, under a new task key,
        after removing what its dead copy wrote."""
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
            self._fail(key, job_info, f"{job_label(job)} could not be run again: {e}\n")
            return
        with self._stop_lock:
            if self._stop_reason or self._jobs.pop(key, None) is None:
                refused = self._stop_reason or ""
            else:
                refused = None
                self._jobs[new.key] = job_info
                aux.update(spec=new, log=new.log_path)
                lost = self._hand_over([(new, aux["request"])])
        if refused is not None:
            if refused:
                self._fail(key, job_info, f"{job_label(job)} was not run again: {refused}\n")
            return
        for info, msg in lost:
            self.report_job_error(info, msg=msg)

    # -- ending ------------------------------------------------------------------------

    def cancel_jobs(self, active_jobs: list[SubmittedJobInfo]) -> None:
        # Our own registry, not ``active_jobs``: the base class empties that list while
        # a status round runs, so a Ctrl-C at that moment would miss jobs.
        with self._stop_lock:
            self._stop_reason = self._stop_reason or "the workflow was cancelled"
            keys = list(self._jobs)
            self._jobs.clear()
        if self._source is not None and self._source.scheduler_lost():
            self._source.stop_workers()  # their supervisors end the jobs
        elif self._dispatcher is not None:
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
            if self._recovery is not None:
                self._recovery.close()
            if self._jobs and self._dispatcher is not None and not self._source.scheduler_lost():
                self._dispatcher.kill(list(self._jobs))
        finally:
            self._source.close()
            self._closed = True
        self.logger.info(f"dask-slurm: Dask cluster closed in {time.monotonic() - started:.1f} s")


def apply_to_job_scheduler(scheduler: Any, change: Plan) -> None:
    """Apply ``change`` to Snakemake's ``JobScheduler`` (snakemake/scheduling/
    job_scheduler.py, 9.x). These are its internals; tests/test_scheduling_internals.py pins
    every one used here, so that a Snakemake release that changes them fails CI instead of
    silently slowing users down."""
    with scheduler._lock:
        if change.lift_rate_limit:
            scheduler.job_rate_limiter = None
            scheduler.resources["_job_count"] = sys.maxsize  # what it asserts without one
        if change.subsample:
            scheduler.subsample = change.subsample
        if change.scheduler == "greedy":
            scheduler._job_selector = scheduler.job_selector_greedy
