"""When to submit, cancel or retire worker jobs (the policy, pure, table-driven)."""

from __future__ import annotations

from typing import Any

import pytest

from snakemake_executor_plugin_dask_slurm.clusters.worker_jobs import policy
from snakemake_executor_plugin_dask_slurm.clusters.worker_jobs.policy import (
    PENDING,
    RUNNING,
    Decision,
    JobView,
    Situation,
    after_failure,
    decide,
)

NOW = 1000.0


def situation(**kw: Any) -> Situation:
    base: dict[str, Any] = dict(
        now=NOW, backlog_cpus=0.0, jobs=(), max_jobs=4, cpus_per_job=8.0, idle_seconds=60.0,
        backlog_since=None, grow_after=5.0,
    )  # fmt: skip
    return Situation(**(base | kw))


def pending(job_id: str, cpus: float = 8.0, submitted: float = NOW - 1) -> JobView:
    return JobView(job_id, PENDING, cpus, None, submitted)


def running(job_id: str, idle_since: float | None = None) -> JobView:
    return JobView(job_id, RUNNING, 8.0, idle_since, NOW - 100)


CASES = [
    # (what, situation, decision)
    ("nothing waits: nothing to do", situation(), Decision()),
    (
        "a backlog younger than grow_after submits nothing",
        situation(backlog_cpus=40, backlog_since=NOW - 2),
        Decision(),
    ),
    (
        "a lasting backlog: as many jobs as it needs (40 CPUs / 8 a job)",
        situation(backlog_cpus=40, backlog_since=NOW - 10, max_jobs=10),
        Decision(submit=5),
    ),
    (
        "never more than max_jobs, pending and running together",
        situation(backlog_cpus=400, backlog_since=NOW - 10, jobs=[running("1")], max_jobs=3),
        Decision(submit=2),
    ),
    (
        "a partly covered backlog submits only the rest",
        situation(backlog_cpus=20, backlog_since=NOW - 10, jobs=[pending("1")]),
        Decision(submit=2),
    ),
    (
        "storm case: a queue that starts nothing for minutes submits nothing more",
        situation(
            backlog_cpus=32,
            backlog_since=NOW - 600,
            jobs=[pending(str(i), submitted=NOW - 590) for i in range(4)],
            max_jobs=100,
        ),
        Decision(),
    ),
    (
        "back-off: no submission before next_submission",
        situation(backlog_cpus=8, backlog_since=NOW - 10, next_submission=NOW + 5),
        Decision(),
    ),
    (
        "paused after repeated failures: no submission at all",
        situation(backlog_cpus=8, backlog_since=NOW - 10, paused=True),
        Decision(),
    ),
    (
        "quiet for less than idle_seconds: nothing is cancelled or retired",
        situation(empty_since=NOW - 30, jobs=[pending("1"), running("2", NOW - 100)]),
        Decision(),
    ),
    (
        "quiet long enough: pending jobs cancelled (newest first), idle running ones retired",
        situation(
            empty_since=NOW - 61,
            jobs=[
                pending("1", submitted=NOW - 50),
                pending("2", submitted=NOW - 10),
                running("3", NOW - 70),
                running("4", NOW - 10),  # idle, but not for long enough
                running("5", None),  # busy
            ],
        ),
        Decision(cancel=("2", "1"), retire=("3",)),
    ),
]


@pytest.mark.parametrize(("what", "given", "expected"), CASES, ids=[c[0] for c in CASES])
def test_decide(what: str, given: Situation, expected: Decision) -> None:
    assert decide(given) == expected, what


def test_failures_back_off_then_pause() -> None:
    delays = []
    for n in range(1, policy.MAX_FAILURES + 1):
        when, paused = after_failure(n, NOW)
        delays.append(when - NOW)
        assert paused == (n >= policy.MAX_FAILURES)
    assert delays == [10.0, 20.0, 40.0, 80.0]
    assert after_failure(20, NOW)[0] - NOW == policy.BACKOFF_MAX
