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
    successor_due,
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


def running(
    job_id: str, idle_since: float | None = None, landing_at: float | None = None, **kw: Any
) -> JobView:
    return JobView(job_id, RUNNING, 8.0, idle_since, NOW - 100, landing_at, **kw)


def successor(job_id: str) -> JobView:
    return JobView(job_id, PENDING, 8.0, None, NOW - 5, replacing=True)


#: Waits seen so far (submission to workers joined): the longest of the last five counts.
WAITS = (300.0, 20.0, 30.0, 40.0, 10.0, 40.0)


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
    # Replaced in time: due at landing - 40 s * 1.25 - 15 s = landing - 65 s.
    (
        "a busy job landing in 66 s: its successor is not due yet",
        situation(jobs=[running("1", landing_at=NOW + 66)], waits=WAITS),
        Decision(),
    ),
    (
        "a busy job landing in 65 s: its successor is due",
        situation(jobs=[running("1", landing_at=NOW + 65)], waits=WAITS),
        Decision(replace=("1",)),
    ),
    (
        "an idle job with nothing waiting has no successor (it is retired in time)",
        situation(jobs=[running("1", NOW - 5, landing_at=NOW + 10)], waits=WAITS),
        Decision(),
    ),
    (
        "an idle job while jobs wait still does (they may need its capacity)",
        situation(
            jobs=[running("1", NOW - 5, landing_at=NOW + 10)],
            waits=WAITS,
            backlog_cpus=4,
            backlog_since=NOW - 1,
        ),
        Decision(replace=("1",)),
    ),
    (
        "replaced once only; no successor for a job without a limit",
        situation(jobs=[running("1", landing_at=NOW, replaced=True), running("2")]),
        Decision(),
    ),
    (
        "a successor even at max_jobs",
        situation(jobs=[running("1", landing_at=NOW), running("2")], max_jobs=2),
        Decision(replace=("1",)),
    ),
    (
        "the job being replaced no longer counts towards max_jobs, its successor does, "
        "and the successor is not capacity to come for the backlog",
        situation(
            jobs=[running("1", landing_at=NOW + 100, replaced=True), running("2"), successor("3")],
            max_jobs=3,
            backlog_cpus=8,
            backlog_since=NOW - 10,
        ),
        Decision(submit=1),
    ),
    (
        "a successor is not cancelled when nothing waits",
        situation(
            jobs=[running("1", landing_at=NOW + 100, replaced=True), successor("2")],
            empty_since=NOW - 100,
        ),
        Decision(),
    ),
    (
        "no successor while growth backs off or is paused",
        situation(jobs=[running("1", landing_at=NOW)], next_submission=NOW + 5),
        Decision(),
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


@pytest.mark.parametrize(
    ("waits", "due"),
    [
        ((), 1000.0 - 15.0),  # nothing seen yet: the lead only
        ((20.0,), 1000.0 - 25.0 - 15.0),
        ((600.0, 20.0, 30.0, 40.0, 10.0, 40.0), 1000.0 - 50.0 - 15.0),  # the last five count
        ((3600.0,), 1000.0 - 4500.0 - 15.0),  # a queue of an hour: long before its start
    ],
)
def test_a_successor_is_due_the_longest_recent_wait_before_the_landing(
    waits: tuple[float, ...], due: float
) -> None:
    assert successor_due(1000.0, waits) == due
