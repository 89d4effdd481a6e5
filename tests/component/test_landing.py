"""The landing thread and the executor's clock, on a real registry and real threads, with
a clock a few seconds long: it lands at the landing point (or at once on SIGUSR1's request),
stops what cannot finish by the hard stop, asks Snakemake to end, stops the rest at the hard
stop; a rule's jobs that cannot finish are refused, the first one loudly."""

from __future__ import annotations

import threading
import time

from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo

from snakemake_executor_plugin_dask_slurm.dispatch.clock.allocation import (
    AllocationClock,
    RunControls,
)
from snakemake_executor_plugin_dask_slurm.dispatch.clock.policy import AllocationEnd
from snakemake_executor_plugin_dask_slurm.dispatch.outcomes import Finished
from snakemake_executor_plugin_dask_slurm.dispatch.registry import JobRecord, JobRegistry
from snakemake_executor_plugin_dask_slurm.worker.wire import TaskSpec
from tests.fakes import FakeJob


class Recorder:
    """The executor's side: stopping a job ends it, and its failure is reported (it leaves
    the registry)."""

    def __init__(self) -> None:
        self.registry: JobRegistry | None = None
        self.stopped: list[tuple[float, list[str]]] = []
        self.exits: list[float] = []
        self.lines: list[str] = []
        self.done = threading.Event()

    def stop(self, keys: list[str]) -> None:
        self.stopped.append((time.time(), sorted(keys)))
        for key in keys:
            assert self.registry is not None
            self.registry.pop(key)
        if len(self.stopped) == 2:
            self.done.set()


def register(registry: JobRegistry, key: str, since: float, expected: float | None) -> None:
    info = SubmittedJobInfo(FakeJob(name=key.split("-")[0]), external_jobid=key)
    spec = TaskSpec(key, ("true",), "/", (), "/dev/null", None)
    record = JobRecord(info, spec, {"cpus": 1}, "direct", since, expected)
    registry.hand_over([record], lambda i: None, lambda tasks: None)


def record_of(rule: str) -> JobRecord:
    info = SubmittedJobInfo(FakeJob(name=rule), external_jobid=f"{rule}-1")
    return JobRecord(info, TaskSpec(f"{rule}-1", (), "/", (), "/dev/null", None), {}, "direct")


def make(
    clock: AllocationEnd | None,
    registry: JobRegistry,
    rec: Recorder,
    started: dict[str, float] | None = None,
) -> AllocationClock:
    """The clock, with the run's side recorded; ``started``: what the workers say has
    started (None: they could not be asked, every job counts as started)."""
    rec.registry = registry

    def withdraw(keys: list[str]) -> dict[str, float] | None:
        if started is None:
            return None
        for key in keys:  # taken back: reported (quietly), gone from the registry
            if key not in started:
                registry.pop(key)
        return {k: v for k, v in started.items() if k in keys}

    controls = RunControls(rec.stop, lambda: rec.exits.append(time.time()), withdraw)
    return AllocationClock(clock, 2.0, None, registry, controls, rec.lines.append)


def test_it_lands_at_the_landing_point_and_stops_the_rest_at_the_hard_stop() -> None:
    start = time.time()
    clock = AllocationEnd(end=start + 3.0, margin=2.0, safety=0.0, source="test")  # lands at +1 s
    registry, rec = JobRegistry(), Recorder()
    register(registry, "quick-1", start, 0.5)  # ends by the hard stop (+2 s): goes on
    register(registry, "unknown-1", start, None)
    register(registry, "long-1", start, 60.0)
    register(registry, "queued-1", start, 0.5)  # handed over, not started: taken back
    started = {"quick-1": start, "unknown-1": start, "long-1": start}
    watch = make(clock, registry, rec, started)
    watch.start()
    try:
        assert rec.done.wait(10), rec.stopped
    finally:
        watch.close()
    (landed, first), (hard, rest) = rec.stopped
    assert first == ["long-1", "unknown-1"] and 0.9 < landed - start < 1.5
    assert rec.exits and abs(rec.exits[0] - landed) < 0.5  # Snakemake told to end
    assert rest == ["quick-1"] and 1.9 < hard - start < 2.5  # still registered: stopped
    assert (
        registry.stop_reason
        and "landing before the allocation's time limit" in registry.stop_reason
    )
    assert all(registry.is_quiet(k) for k in ("quick-1", "unknown-1", "long-1", "queued-1"))
    assert rec.lines[0].endswith(
        "landing. No job starts any more; 1 started job(s) expected to finish in time go on, "
        "2 started job(s) that could not are stopped now (rule long (1), rule unknown (1); "
        "Snakemake removes what they wrote), 1 job(s) that had not started are taken back, "
        "not run. Snakemake ends as soon as the started jobs that go on are done."
    ), rec.lines[0]
    summary = watch.summary("snakemake --executor dask-slurm")
    assert summary and summary.startswith(
        "the run landed before the allocation's time limit: 0 job(s) finished in this "
        "allocation, 3 started job(s) stopped (their outputs removed), 1 never started."
    ), summary
    assert summary.endswith("needed): snakemake --executor dask-slurm")


def test_sigusr1_lands_at_once_even_without_a_known_end() -> None:
    registry, rec = JobRegistry(), Recorder()
    register(registry, "a-1", time.time(), 5.0)
    watch = make(None, registry, rec)
    watch.start()
    try:
        asked = time.time()
        watch.request("SIGUSR1 received")
        deadline = time.time() + 5
        while not rec.stopped and time.time() < deadline:
            time.sleep(0.01)
    finally:
        watch.close()
    when, keys = rec.stopped[0]
    assert keys == ["a-1"] and when - asked < 0.5  # no known end: nothing finishes in time
    assert watch.landed_for == "SIGUSR1 received"
    summary = watch.summary("cmd")  # not "before the time limit": there is none
    assert summary and summary.startswith("the run landed (SIGUSR1 received): "), summary


def test_jobs_that_cannot_finish_are_refused_the_first_of_a_rule_loudly() -> None:
    now = time.time()
    clock = AllocationEnd(end=now + 600, margin=120, safety=30, source="test")
    registry, rec = JobRegistry(), Recorder()
    watch = make(clock, registry, rec)
    long_job = FakeJob(name="big", resources={"runtime": 60})
    why, expected = watch.check(long_job, "big-1")
    assert expected == 3600.0 and why and "needs about 1 h (its runtime resource)" in why
    assert not registry.is_quiet("big-1")
    why, _ = watch.check(FakeJob(name="big", jobid=2, resources={"runtime": 60}), "big-2")
    assert why and registry.is_quiet("big-2")  # the rule was explained once
    assert watch.check(FakeJob(name="small", resources={"runtime": 1}), "small-1") == (None, 60.0)
    assert watch.check(FakeJob(name="new"), "new-1") == (None, None)  # unknown: may start
    for _ in range(3):
        watch.ended(record_of("slow"), Finished("k", True, seconds=500.0))
    why, expected = watch.check(FakeJob(name="slow"), "slow-1")
    assert expected == 500.0 and why and "90% percentile of 3 earlier jobs" in why
    summary = watch.summary("cmd")
    assert summary and "3 job(s) finished" in summary and "3 not started" in summary
