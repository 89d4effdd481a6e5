"""Placement by time (dispatch/clock/placement.py) and a worker job's landing
(dispatch/clock/worker_jobs.py), on a real registry: which jobs are refused and what they
ask Dask for; what a job handed over again asks; which jobs a landing moves, stops or lets
go on, and what is expected of a stopped one."""

from __future__ import annotations

import time

import pytest
from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo

from snakemake_executor_plugin_dask_slurm.dispatch.clock.allocation import (
    AllocationClock,
    RunControls,
)
from snakemake_executor_plugin_dask_slurm.dispatch.clock.placement import Placement
from snakemake_executor_plugin_dask_slurm.dispatch.clock.policy import AllocationEnd
from snakemake_executor_plugin_dask_slurm.dispatch.clock.worker_jobs import WorkerJobLanding
from snakemake_executor_plugin_dask_slurm.dispatch.registry import JobRecord, JobRegistry
from snakemake_executor_plugin_dask_slurm.worker.clock import Runway, plan_runway
from snakemake_executor_plugin_dask_slurm.worker.wire import TaskSpec
from tests.fakes import FakeJob

#: Worker jobs of 2 minutes: a fresh one offers a job at most 73 s (with 7.5 s margin).
TWO_MINUTES = plan_runway(120.0, None, False, 120.0, 30.0)


def record(key: str, expected: float | None, request: dict[str, float] | None = None) -> JobRecord:
    job = FakeJob(name=key.split("-")[0])
    spec = TaskSpec(key, ("true",), "/", (), "/dev/null", None)
    return JobRecord(
        SubmittedJobInfo(job, external_jobid=key), spec, request or {"cpus": 1.0}, "direct",
        time.time(), expected,
    )  # fmt: skip


def test_no_clock_no_placement() -> None:
    assert Placement.for_run(None, None, JobRegistry().quiet) is None


def test_worker_jobs_only_refuse_what_no_worker_job_can_hold_and_place_the_rest() -> None:
    assert Runway(2, 30.0, 7.5, 73.0, 120.0) == TWO_MINUTES
    registry = JobRegistry()
    placement = Placement(None, TWO_MINUTES, registry.quiet)
    assert placement.check(FakeJob(name="ok", resources={"runtime": 1}), "ok-1") == (None, 60.0)
    assert placement.needs(60.0) == 67.5 and placement.needs(None) is None
    now = 1_800_000_001.0
    assert placement.runway_name(60.0, now) == "until-1800000070"  # 67.5 s on, rounded up
    assert placement.runway_name(None, now) == "until-1800000010"  # unknown: the margin
    why, seconds = placement.check(FakeJob(name="big", resources={"runtime": 2}), "big-1")
    assert seconds == 120.0 and why is not None
    assert why.startswith("rule big (jobid 1, attempt 1) was not started: it needs about 2 min")
    assert "offers a job at most about 73 s" in why and not registry.is_quiet("big-1")
    why, _ = placement.check(FakeJob(name="big", jobid=2, resources={"runtime": 2}), "big-2")
    assert why is not None and registry.is_quiet("big-2")  # the rule was explained once
    assert placement.check(FakeJob(name="new"), "new-1") == (None, None)  # unknown: anywhere


def test_a_job_handed_over_again_asks_for_time_from_now_or_is_refused() -> None:
    placement = Placement(None, TWO_MINUTES, JobRegistry().quiet)
    again = record("farm-1", 20.0, {"cpus": 1.0, "until-10": 1.0})
    before = time.time()
    assert placement.again(again) is None
    (runway,) = [name for name in again.request if name.startswith("until-")]
    assert again.request["cpus"] == 1.0 and int(runway[6:]) >= before + 27.5
    assert again.spec.needs == 27.5
    # Stopped at a worker job's limit after 60 s: expected 90 s from then on, too long.
    stopped = record("long-1", 90.0)
    stopped.stopped_at_limit = "long-1"
    why = placement.again(stopped)
    assert why and "half again what it ran before a worker job's limit stopped it" in why


def test_in_an_allocation_the_runs_clock_refuses_what_cannot_finish_before_it_lands() -> None:
    registry = JobRegistry()
    end = AllocationEnd(time.time() + 100, 30.0, 7.5, "test")
    controls = RunControls(lambda keys: None, lambda: None)
    clock = AllocationClock(end, 30.0, None, registry, controls, print)
    placement = Placement.for_run(clock, None, registry.quiet)
    assert placement is not None and placement.safety == 7.5
    assert placement.runway_name(10.0, time.time()) is None  # no runway: nothing asked
    late = record("late-1", 80.0)
    why = placement.again(late)
    assert why and why.startswith("rule late (jobid 1, attempt 1) was not started: it needs")
    assert placement.again(record("ok-1", 10.0)) is None


class Run:
    """The dispatcher's side of a landing: which jobs run (and since when), and what was
    withdrawn from where and killed."""

    def __init__(self, started: dict[str, float] | None) -> None:
        self.started = started
        self.withdrawn: list[tuple[list[str], str]] = []
        self.killed: list[list[str]] = []

    def withdraw(self, keys: list[str], why: str) -> dict[str, float] | None:
        self.withdrawn.append((keys, why))
        if self.started is None:
            return None
        return {k: v for k, v in self.started.items() if k in keys}


def test_a_landing_moves_what_waits_stops_what_cannot_finish_and_lets_the_rest_go_on() -> None:
    now = time.time()
    registry = JobRegistry()
    records = [
        record("quick-1", 5.0),  # started 10 s ago, ends by the hard stop (in 20 s)
        record("slow-1", 60.0),  # started 10 s ago, needs 50 s more: stopped
        record("learned-1", None),  # handed over before its rule was learned: 5 s now
        record("unknown-1", None),  # nothing known: stopped
        record("waiting-1", 5.0),  # not started: moved
    ]
    registry.hand_over(records, lambda info: None, lambda tasks: None)
    run = Run({k: now - 10 for k in ("quick-1", "slow-1", "learned-1", "unknown-1")})

    def expected(r: JobRecord) -> float | None:
        return 5.0 if r.job.name == "learned" else r.expected

    landing = WorkerJobLanding(registry, run.withdraw, run.killed.append, expected)
    keys = [r.key for r in records] + ["gone-1"]  # one no longer registered: left alone
    assert landing.land("42", keys, now + 20) == (2, 2, 1)
    assert run.withdrawn == [
        (
            [r.key for r in records],
            "not started: its worker job 42 is landing before its time limit",
        )
    ]
    assert run.killed == [["slow-1", "unknown-1"]]
    slow, unknown = registry.records(["slow-1", "unknown-1"])
    assert slow.stopped_at_limit == "slow-1" and unknown.stopped_at_limit == "unknown-1"
    assert slow.expected == 60.0 and unknown.expected == pytest.approx(15.0, abs=0.5)
    assert landing.jobs_stopped == 2 and landing.jobs_moved == 1
    # The hard stop: what still runs there is stopped alike.
    assert landing.stop("42", ["quick-1", "gone-1"]) == 1
    assert run.killed[-1] == ["quick-1"] and landing.jobs_stopped == 3


def test_workers_that_cannot_be_asked_leave_every_job_counted_as_started() -> None:
    registry = JobRegistry()
    registry.hand_over([record("a-1", 1.0)], lambda info: None, lambda tasks: None)
    run = Run(None)
    landing = WorkerJobLanding(registry, run.withdraw, run.killed.append)
    assert landing.land("7", ["a-1"], time.time() + 1000) == (1, 0, 0)
    assert run.killed == []
