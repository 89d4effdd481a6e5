"""One run's parts, started and wired once, and closed in the order that leaves nothing
behind: the cluster source, the dispatcher, what becomes of every ended task
(:class:`.failures.Failures`), the clocks (the allocation's, every worker's) and the intake
of Snakemake's jobs. The executor (:mod:`.plugin`) holds one :class:`Run` and calls it from
Snakemake's hooks; a new part of a run is wired here, not in the hooks.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..clusters.base import ClusterSource, started_lines, worker_offers
from ..clusters.run_dir import RunFiles
from ..config import RunConfig
from ..dispatch.admission import Capacity
from ..dispatch.again import Snakemake
from ..dispatch.clock.allocation import AllocationClock, RunControls
from ..dispatch.clock.placement import Placement
from ..dispatch.clock.worker_jobs import WorkerJobLanding
from ..dispatch.cold_ways import ColdWays
from ..dispatch.dispatcher import Dispatcher
from ..dispatch.intake import Intake
from ..dispatch.job_commands import JobCommandBuilder
from ..dispatch.listeners import Listeners
from ..dispatch.outcomes import WorkerRef
from ..dispatch.registry import JobRegistry
from ..dispatch.scheduling import Given
from ..dispatch.usage_listener import usage_listener
from ..report.hints import run_speed_hint
from ..worker import timing
from ..worker.warm_host import PRIME_VARIABLE
from . import signals
from .failures import Failures, Say


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
    cluster's start overlaps the rest of Snakemake's; :meth:`Run.start` then waits for it.
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


@dataclass
class Run:
    source: ClusterSource
    dispatcher: Dispatcher
    failures: Failures
    intake: Intake
    clock: AllocationClock | None
    files: RunFiles

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
    ) -> Run:
        """Start ``source`` (launched by :func:`launch`, whose ``files`` these are, or
        not yet) and wire the run around it. ``scheduling`` and ``nodes``: what Snakemake
        runs with (for the speed hint); ``token``: the run's. If the start fails, what it
        started is stopped and the run's files released before the error goes on."""
        now, say = scheduling, hooks.say
        if files is None:
            files = RunFiles.open(config.run_dir)  # one run's files at a time
        say.info(f"starting {source.description}")
        try:
            client = source.start()  # stops what it started if it fails
            offers = worker_offers(client)
            coming = source.growth.future_offers() if source.growth is not None else []
            capacity = Capacity.from_workers(offers + coming)
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
            if hint:  # only where a setting the user chose still caps throughput
                say.info(f"hint: {hint}")
            usage = usage_listener(  # before the dispatcher, which tells it of every worker
                config.usage_report_dir, token, config.cluster,
                lambda: registry.stop_reason, say.info, os.environ,
            )  # fmt: skip
            listeners.extend([usage] if usage else [])
            listeners.append(ColdWays(say.info))
            dispatcher = Dispatcher(client, hooks.wake, hooks.on_removed, listeners)
        except BaseException:
            stop(source, files)
            raise
        if timing.ON:
            timing.record("ready", time.time(), cpus)
            timing.record("cluster_start", getattr(source, "bringup_seconds", None) or 0.0)
        failures = Failures(
            registry, source, dispatcher, hooks.snakemake, config.startup_timeout,
            listeners, say, str(files.detail_log),
        )  # fmt: skip
        margins = (config.landing_margin, config.runtime_margin)
        controls = RunControls(failures.stop_jobs, hooks.exit_gracefully, failures.withdraw)
        planned = source.clock  # the workers' ends as the source planned them
        clock = AllocationClock.for_run(
            os.environ, margins, registry, controls, say.info, say.warn,
            planned.allocation_end() if planned is not None else None,
        )  # fmt: skip
        if clock is not None:
            listeners.append(clock)
            signals.on_sigusr1(clock.request)
        runway = planned.runway() if planned is not None else None
        placement = Placement.for_run(clock, runway, registry.quiet)
        if placement is not None:  # every worker's clock (docs/architecture.md)
            listeners.append(placement)
            failures.again.placement = placement
        durations = placement.durations if placement is not None else None
        landing = WorkerJobLanding.of(registry, dispatcher, durations)
        lands = planned is not None and planned.land_worker_jobs_with(landing)
        if lands and landing.learning is not None:
            listeners.append(landing)  # worker jobs land, and nothing else learns
        intake = Intake(
            builder,
            capacity,
            cap=config.cluster == "local",
            key_of=hooks.key_of,
            note=say.info,
            placement=placement,
        )
        return cls(source, dispatcher, failures, intake, clock, files)

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
