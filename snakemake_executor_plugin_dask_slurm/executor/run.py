"""One run, wired in one place: planned and launched at the executor's start
(:class:`PlannedRun`: the prime job chosen, the run directory claimed, the local early
workers, the cluster source made and launched), then at the first job started and wired
once (:class:`WiredRun`: the dispatcher, the clocks, what becomes of every ended task, the
intake of Snakemake's jobs), and closed in the order that leaves nothing behind. The
executor (:mod:`.plugin`) holds one of each and calls them from Snakemake's hooks; a new
part of a run is wired here, not in the hooks.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..clusters.base import ClusterSource, started_lines, worker_offers
from ..clusters.choose import local_worker_cpus, make_source, run_security
from ..clusters.early import EarlyWorkers, worth_starting_early
from ..clusters.run_dir import RunFiles, check_run_dir
from ..config import RunConfig
from ..dispatch.admission import Capacity
from ..dispatch.again import Again, Snakemake
from ..dispatch.clock.allocation import AllocationClock, RunControls
from ..dispatch.clock.placement import Placement
from ..dispatch.clock.worker_jobs import WorkerJobLanding
from ..dispatch.cold_ways import ColdWays
from ..dispatch.dispatcher import Dispatcher
from ..dispatch.ends import Settler, Submitter
from ..dispatch.intake import Intake
from ..dispatch.job_commands import JobCommandBuilder
from ..dispatch.listeners import Listeners
from ..dispatch.outcomes import WorkerRef
from ..dispatch.registry import JobRegistry
from ..dispatch.scheduling import Given, cap_threads_like_cores
from ..dispatch.usage_listener import usage_listener
from ..errors import DaskSlurmError
from ..report.hints import run_speed_hint
from ..report.usage.write import root_problem
from ..worker import timing
from ..worker.warm_host import PRIME_VARIABLE
from . import signals
from .failures import Failures, Stopper
from .say import Say
from .status import StatusReporter, start_status


@dataclass(frozen=True)
class Hooks:
    """What a run calls back into: the executor and, through it, Snakemake."""

    say: Say
    snakemake: Snakemake
    #: Wake Snakemake's status loop (a task ended, a worker left).
    wake: Callable[[], None]
    #: A worker left the scheduler unexpectedly (Dask's event thread).
    on_removed: Callable[[WorkerRef, bool], None]
    #: Snakemake schedules nothing more and ends once its running jobs are told.
    exit_gracefully: Callable[[], None]
    #: The Dask key of a Snakemake job.
    key_of: Callable[[Any], str]
    #: Snakemake's jobs done and its total (:func:`..snakemake_internals.scheduler.progress`).
    progress: Callable[[], tuple[int | None, int | None]] = lambda: (None, None)


#: In the run directory: the job command the workers' warm processes parse at their start.
PRIME_FILE = "warm-prime.json"


def claim(config: RunConfig, prime: Mapping[str, Any] | None) -> tuple[RunFiles, dict[str, str]]:
    """Claim the run directory (one run's files at a time) for a run that will launch its
    cluster; and what its workers' environment gets from this run: ``prime``, a job command
    of the workflow that goes the warm way
    (:meth:`..dispatch.job_commands.JobCommandBuilder.prime_request`), written into the run
    directory and named there, so that each worker starts its warm process at once and has
    it parse the workflow before the first warm job arrives."""
    files = RunFiles.open(config.run_dir)
    try:
        worker_env = {}
        if prime is not None:
            path = config.run_dir / PRIME_FILE
            path.write_text(json.dumps(prime))
            worker_env[PRIME_VARIABLE] = str(path)
    except BaseException:
        files.close()
        raise
    return files, worker_env


def launch(source: ClusterSource, files: RunFiles, worker_env: Mapping[str, str]) -> None:
    """Launch ``source``'s processes (``worker_env`` added to the workers': :func:`claim`),
    then check its commands (:meth:`~..clusters.base.ClusterSource.preflight`: in this
    process, it imports Dask's command line, which the launched processes import
    meanwhile). Called at the executor's start when Snakemake has jobs to run, so that the
    cluster's start overlaps the rest of Snakemake's; :meth:`WiredRun.start` then waits for it.
    If the check fails, what was launched is stopped and the files released before the
    error goes on."""
    try:
        source.launch(worker_env)
        source.preflight()
    except BaseException:
        stop(source, files)
        raise


def stop(source: ClusterSource, files: RunFiles) -> None:
    """Stop what ``source`` started and release the run's files (a start that failed)."""
    try:
        source.close()
    finally:
        files.close()


def given_cores(workflow: Any) -> int | None:
    """Snakemake's ``--cores``, if the user gave a number."""
    cores = workflow.resource_settings.cores
    return cores if isinstance(cores, int) and not isinstance(cores, bool) else None


def cap_local_threads(
    config: RunConfig, workflow: Any, cores: int | None, say: Callable[[str], None]
) -> int | None:
    """Local mode without ``--cores``: a rule claims at most one local worker's CPUs (as
    with --cores); how many (None: not capped)."""
    if config.cluster != "local" or cores is not None:
        return None
    local_cores = local_worker_cpus(config)
    cap_threads_like_cores(workflow, local_cores)
    say(
        f"local mode: rules claiming more than {local_cores} threads will be "
        "scaled down (as with --cores)"
    )
    return local_cores


def check_run(config: RunConfig) -> None:
    """The run's directory and usage report's are usable (raises if not): checked before
    anything of the run is said or changed (:func:`cap_local_threads`, the plan)."""
    check_run_dir(config.run_dir)
    if config.usage_report_dir is not None:
        problem = root_problem(config.usage_report_dir)
        if problem:
            raise DaskSlurmError(problem)


class PlannedRun:
    """A run's cluster as the executor's start leaves it: planned, and launched when
    Snakemake has jobs to run; started at the first job (:meth:`WiredRun.start`), or, if
    it never is, stopped at shutdown or at the interpreter's exit (Snakemake failed before
    its first round)."""

    def __init__(self, source: ClusterSource, files: RunFiles | None) -> None:
        self._source: ClusterSource | None = source
        #: The run directory's claim of a launched cluster (None: not launched).
        self._files = files
        if files is not None:
            atexit.register(self.close)

    @classmethod
    def plan(
        cls, config: RunConfig, builder: JobCommandBuilder, workflow: Any, logger: Any,
        cores: int | None, name: str,
    ) -> PlannedRun:  # fmt: skip
        """Plan the cluster (its directories checked before: :func:`check_run`) and, when
        there are jobs to run, launch it at once, so that the Dask processes start while
        Snakemake finishes its own start (and this process imports Dask for the
        preflight); the first job waits for them. The workers' warm processes parse the
        workflow meanwhile, if a job of it goes the warm way: in local mode the workers
        start before the plan for that (clusters/early.py). ``cores``: Snakemake's
        (:func:`given_cores`); ``name``: the run's worker jobs' in SLURM's queue."""
        if not has_jobs(workflow):  # planned (settings, allocation) and checked only
            source = make_source(config, logger, cores, name)
            source.preflight()
            return cls(source, None)
        try:
            prime = builder.prime_request(jobs_to_look_at(workflow))
        except Exception:  # the first warm job starts the warm process, as before
            prime = None
        files, worker_env = claim(config, prime)  # the run directory is this run's
        early: EarlyWorkers | None = None
        try:
            if worth_starting_early(config, prime):
                early = EarlyWorkers.start(config, run_security(config, None), worker_env)
            source = make_source(config, logger, cores, name, early)
        except BaseException:
            if early is not None:
                early.close()
            files.close()
            raise
        launch(source, files, worker_env)  # (stops it and releases the files if it fails)
        return cls(source, files)

    def take(self) -> tuple[ClusterSource, RunFiles | None] | None:
        """The source to start and its files (once; None after)."""
        if self._source is None:
            return None
        taken, self._source, self._files = (self._source, self._files), None, None
        return taken

    def close(self) -> None:
        """Stop the launched cluster if its run never started."""
        atexit.unregister(self.close)
        source, files = self._source, self._files
        self._source, self._files = None, None
        if files is not None and source is not None:
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


@dataclass
class WiredRun:
    source: ClusterSource
    dispatcher: Dispatcher
    failures: Failures
    #: Stops jobs where they run (SIGTERM, Ctrl-C, the allocation's clock).
    stopper: Stopper
    #: A chunk of Snakemake's jobs in (the scheduling thread).
    submitter: Submitter
    #: Every task that ended out (the status thread).
    settler: Settler
    clock: AllocationClock | None
    files: RunFiles
    #: The status file and progress line (executor/status.py).
    status: StatusReporter

    @classmethod
    def start(
        cls,
        source: ClusterSource,
        config: RunConfig,
        registry: JobRegistry,
        listeners: Listeners,
        builder: JobCommandBuilder,
        hooks: Hooks,
        *,
        scheduling: Given,
        nodes: Any,
        token: str,
        files: RunFiles | None = None,
    ) -> WiredRun:
        """Start ``source`` (launched by :func:`launch`, whose ``files`` these are, or
        not yet) and wire the run around it. ``scheduling`` and ``nodes``: what Snakemake
        runs with (for the speed hint); ``token``: the run's. If the start fails, what it
        started is stopped and the run's files released before the error goes on."""
        say = hooks.say
        if files is None:
            files = RunFiles.open(config.run_dir)  # one run's files at a time
        say.info(f"starting {source.description}")
        try:
            client = source.start()  # stops what it started if it fails
            offers = worker_offers(client)
            coming = source.growth.future_offers() if source.growth is not None else []
            capacity = Capacity.from_workers(offers + coming)
            cpus = _say_started(source, offers, say, scheduling, nodes)
            usage = usage_listener(  # before the dispatcher, which tells it of every worker
                config.usage_report_dir, token, config.cluster,
                lambda: registry.stop_reason, say.info, os.environ,
            )  # fmt: skip
            listeners.extend([usage] if usage else [])
            listeners.append(ColdWays(say.info))
            batch = config.batch_size if source.growth is None else 1  # not while it grows
            dispatcher = Dispatcher(client, hooks.wake, hooks.on_removed, listeners, batch)
        except BaseException:
            stop(source, files)
            raise
        if timing.ON:
            timing.record("ready", time.time(), cpus)
            timing.record("cluster_start", getattr(source, "bringup_seconds", None) or 0.0)
        parts = _Parts(source, config, registry, listeners, dispatcher, hooks)
        return parts.wire(builder, capacity, files)

    def close(self, registry: JobRegistry, say: Callable[[str], None]) -> None:
        """Stop the clock and the recovery, kill the jobs still registered, then close the
        source (which stops its worker jobs' growth before its client closes, and cancels
        them after its own processes are gone)."""
        started = time.monotonic()
        try:
            if self.clock is not None:
                self.clock.close()
            self.failures.close()
            keys = registry.keys()
            if keys and not self.source.scheduler_lost():
                self.dispatcher.kill(keys)
            self.dispatcher.close()
        finally:
            try:
                self.source.close()
            finally:
                self.files.close()
                for line in self.source.closing_lines():
                    say(line)
            if timing.ON:
                timing.record("cluster_close", getattr(self.source, "teardown_seconds", 0.0))
        say(f"Dask cluster closed in {time.monotonic() - started:.1f} s")


def _say_started(
    source: ClusterSource, offers: list[dict[str, float]], say: Say, now: Given, nodes: Any
) -> int:
    """Say how the cluster started (and a hint where a setting the user chose still caps
    throughput); its CPUs."""
    if source.steps:  # with --verbose
        steps = ", ".join(f"{step} {at:.2f} s" for step, at in source.steps)
        say.debug(f"the cluster's start, from its launch: {steps}")
    said, warnings = started_lines(source)
    for line in said:
        say.info(line)
    for line in warnings:
        say.warn(line)
    cpus = int(sum(offer.get("cpus", 0) for offer in offers))
    hint = run_speed_hint(now.rate, now.scheduler, now.subsample, nodes, cpus)
    if hint:
        say.info(f"hint: {hint}")
    return cpus


@dataclass(frozen=True)
class _Parts:
    """What :meth:`WiredRun.start` wires the rest of the run from, once its cluster
    started."""

    source: ClusterSource
    config: RunConfig
    registry: JobRegistry
    listeners: Listeners
    dispatcher: Dispatcher
    hooks: Hooks

    def wire(self, builder: JobCommandBuilder, capacity: Capacity, files: RunFiles) -> WiredRun:
        """The clocks first (the placement by time is given to what hands jobs over
        again), then what becomes of every ended task, then the intake."""
        source, config, registry = self.source, self.config, self.registry
        listeners, dispatcher, say = self.listeners, self.dispatcher, self.hooks.say
        stopper = Stopper(source, dispatcher)
        clock, placement = self._clocks(stopper)
        again = Again(registry, dispatcher, self.hooks.snakemake, listeners, placement)
        failures = Failures(
            registry, source, dispatcher, again, config.startup_timeout, say, str(files.detail_log)
        )
        durations = placement.durations if placement is not None else None
        landing = WorkerJobLanding.of(registry, dispatcher, durations)
        planned = source.clock
        lands = planned is not None and planned.land_worker_jobs_with(landing)
        if lands and landing.learning is not None:
            listeners.append(landing)  # worker jobs land, and nothing else learns
        intake = Intake(
            builder, capacity, cap=config.cluster == "local", key_of=self.hooks.key_of,
            note=say.info, placement=placement,
        )  # fmt: skip
        submitter = Submitter(intake, registry, dispatcher, listeners, again)
        settler = Settler(registry, dispatcher, listeners, again, failures)
        status = start_status(
            config, source, dispatcher.client, self.listeners, registry.in_flight,
            lambda: registry.stop_reason is not None, self.hooks, clock, dispatcher.jobs_of,
        )  # fmt: skip
        return WiredRun(
            source, dispatcher, failures, stopper, submitter, settler, clock, files, status
        )

    def _clocks(self, stopper: Stopper) -> tuple[AllocationClock | None, Placement | None]:
        """The allocation's clock and every worker's (docs/architecture.md), each a
        listener where there is one."""
        config, registry, say = self.config, self.registry, self.hooks.say
        margins = (config.landing_margin, config.runtime_margin)
        controls = RunControls(stopper.stop_jobs, self.hooks.exit_gracefully, stopper.withdraw)
        planned = self.source.clock  # the workers' ends as the source planned them
        clock = AllocationClock.for_run(
            os.environ, margins, registry, controls, say.info, say.warn,
            planned.allocation_end() if planned is not None else None,
        )  # fmt: skip
        if clock is not None:
            self.listeners.append(clock)
            signals.on_sigusr1(clock.request)
        runway = planned.runway() if planned is not None else None
        placement = Placement.for_run(clock, runway, registry.quiet)
        if placement is not None:
            self.listeners.append(placement)
        return clock, placement
