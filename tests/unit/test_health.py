"""Whether no worker left ends the run (pure): the timer and the sentence."""

from __future__ import annotations

import pytest

from snakemake_executor_plugin_dask_slurm.dispatch.health import (
    DEATH_RECORD_WAIT,
    NoWorkers,
    no_worker_problem,
)

DEATHS = ["n2 (pid 7) was killed by signal 9 (SIGKILL)"]


@pytest.mark.parametrize(
    ("waited", "restarts", "deaths", "expected"),
    [
        # no record yet: give the supervisors a moment to write how the workers died
        (0.0, False, [], None),
        (DEATH_RECORD_WAIT - 0.1, False, [], None),
        (DEATH_RECORD_WAIT, False, [], "no Dask worker is left (every worker died; "),
        # a record says how: at once
        (0.0, False, DEATHS, f"no Dask worker is left ({DEATHS[0]}; "),
        # restarted workers get the start-up timeout to come back
        (60.0, True, DEATHS, None),
        (120.0, True, DEATHS, "no Dask worker has been alive for 120 s"),
    ],
)
def test_no_worker_problem(
    waited: float, restarts: bool, deaths: list[str], expected: str | None
) -> None:
    found = no_worker_problem(waited, restarts, 120.0, deaths, "/run/logs")
    if expected is None:
        assert found is None
    else:
        assert found is not None and found.startswith(expected)
        assert ("see the worker logs in /run/logs" in found) is not restarts


def test_the_timer_starts_when_the_last_worker_goes_and_resets_when_one_is_back() -> None:
    asked: list[float] = []

    def deaths() -> list[str]:
        asked.append(1.0)
        return []

    timer = NoWorkers(restarts=False, startup_timeout=120.0, logs="/l")
    assert timer.check(10.0, 2, False, False, deaths) is None and timer.since is None
    assert timer.check(11.0, 0, False, False, deaths) is None and timer.since == 11.0
    found = timer.check(11.0 + DEATH_RECORD_WAIT, 0, False, False, deaths)
    assert found is not None and "every worker died" in found
    assert timer.check(20.0, 1, False, False, deaths) is None and timer.since is None
    assert len(asked) == 2  # only while none is alive


@pytest.mark.parametrize(
    ("may_come", "scheduler_lost"),
    [(True, False), (False, True)],
)
def test_no_worker_is_not_the_end_while_workers_may_come_or_the_scheduler_is_gone(
    may_come: bool, scheduler_lost: bool
) -> None:
    timer = NoWorkers(restarts=False, startup_timeout=120.0, logs="/l")
    for now in (0.0, 100.0):
        assert timer.check(now, 0, may_come, scheduler_lost, lambda: DEATHS) is None
    assert timer.since is None
