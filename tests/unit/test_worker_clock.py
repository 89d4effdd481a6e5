"""Every worker's clock (pure): the runway grid Dask places jobs by, which workers a job
may go to given their landing points, the start check a worker makes, and the run's
choice of grid and margins."""

from __future__ import annotations

import pytest

from snakemake_executor_plugin_dask_slurm.worker.clock import (
    MAX_ADVERTISED,
    RUNWAY_QUANTITY,
    Runway,
    advertised,
    grid_step,
    is_runway,
    landing_from_env,
    plan_runway,
    runway_request,
    scaled_margins,
    too_late,
    without_runway,
)

NOW = 1_800_000_000.0  # a multiple of 10


def placed(workers: dict[str, float], needs: float, now: float, step: int) -> list[str]:
    """Where Dask may place a job that asks for ``runway_request``: the workers (started
    at ``NOW``) that advertise that resource."""
    name = runway_request(needs, now, step)
    return [w for w, landing in workers.items() if name in advertised(landing, NOW, step)]


WORKERS = {"early": NOW + 100, "late": NOW + 1000, "later": NOW + 1005}


@pytest.mark.parametrize(
    ("needs", "now", "step", "expected"),
    [
        (50.0, NOW, 10, ["early", "late", "later"]),  # fits all
        (100.0, NOW, 10, ["early", "late", "later"]),  # exactly at early's landing point
        (101.0, NOW, 10, ["late", "later"]),  # a second too long for early
        (60.0, NOW + 45, 10, ["late", "later"]),  # early has 55 s left: not enough
        (994.0, NOW, 10, ["late", "later"]),  # rounded up to 1000: late still has it
        (1001.0, NOW, 10, []),  # later lands at 1005, but its grid stops at 1000
        (1001.0, NOW, 5, ["later"]),  # a finer grid sees it
        (0.0, NOW + 101, 10, ["late", "later"]),  # early landed: nothing goes there
    ],
)
def test_a_job_is_placed_only_where_it_can_finish_before_the_landing_point(
    needs: float, now: float, step: int, expected: list[str]
) -> None:
    assert placed(WORKERS, needs, now, step) == expected


@pytest.mark.parametrize("step", [1, 7, 10, 60])
@pytest.mark.parametrize("needs", [0.0, 3.5, 99.0, 250.0, 990.0])
def test_the_grid_is_safe_and_loses_at_most_two_steps(step: int, needs: float) -> None:
    for landing in (NOW + 97.0, NOW + 1003.0, NOW + 1010.0):
        ok = placed({"w": landing}, needs, NOW, step) == ["w"]
        if ok:  # never a job that cannot finish
            assert NOW + needs <= landing
        elif NOW + needs + 2 * step <= landing:
            raise AssertionError(f"refused with two steps to spare: {needs=} {landing=}")


def test_advertised_points_and_their_quantity() -> None:
    assert advertised(NOW + 25, NOW + 1, 10) == {
        f"until-{int(NOW) + 10}": RUNWAY_QUANTITY,
        f"until-{int(NOW) + 20}": RUNWAY_QUANTITY,
    }
    assert advertised(NOW - 5, NOW, 10) == {}  # landed already
    assert len(advertised(NOW + 10**7, NOW, 1)) == MAX_ADVERTISED  # bounded
    assert runway_request(12.0, NOW + 1, 10) == f"until-{int(NOW) + 20}"
    assert is_runway("until-123") and not is_runway("cpus")
    assert without_runway({"cpus": 4.0, "until-10": 1e6, "mem_mb": 100.0}) == {
        "cpus": 4.0,
        "mem_mb": 100.0,
    }


@pytest.mark.parametrize(
    ("needs", "now", "late"),
    [
        (10.0, NOW + 80, False),  # 90 <= 100
        (20.0, NOW + 80, False),  # exactly
        (21.0, NOW + 80, True),
        (None, NOW + 99, False),  # unknown: until the landing point
        (None, NOW + 100, True),  # from the landing point nothing starts
        (0.0, NOW + 100, True),
    ],
)
def test_a_worker_starts_no_job_that_cannot_finish(
    needs: float | None, now: float, late: bool
) -> None:
    assert too_late(needs, now, NOW + 100) is late


def test_the_landing_point_comes_from_the_environment() -> None:
    assert landing_from_env({"DASK_SLURM_LANDING_AT": "1800000090.5"}) == 1800000090.5
    assert landing_from_env({}) is None
    assert landing_from_env({"DASK_SLURM_LANDING_AT": "soon"}) is None
    assert landing_from_env({"DASK_SLURM_LANDING_AT": "0"}) is None


@pytest.mark.parametrize(
    ("shortest", "longest", "step"),
    [
        (90.0, 90.0, 2),  # worker jobs of 2 min (30 s margin): 45 points
        (3480.0, 3480.0, 58),  # of an hour
        (3480.0, 86400.0, 169),  # beside a day-long allocation: at most 512 points there
        (10.0, 10.0, 1),  # never below a second
    ],
)
def test_grid_step(shortest: float, longest: float, step: int) -> None:
    assert grid_step(shortest, longest) == step


@pytest.mark.parametrize(
    ("limit", "run_left", "run_workers", "expected"),
    [
        # sbatch mode, worker jobs of 2 min: 30 s margin, 7.5 s runtime margin; a fresh
        # one offers 120 - 30 - 15 (joining) - 2 (a step) = 73 s.
        (120.0, None, False, Runway(2, 30.0, 7.5, 73.0, 120.0)),
        # an hour: the margins as set; 3600 - 120 - 60 - 58
        (3600.0, None, False, Runway(58, 120.0, 30.0, 3362.0, 3600.0)),
        # inside a day-long allocation: its workers take what no worker job can
        (3600.0, 86000.0, True, Runway(168, 120.0, 30.0, None, 3600.0)),
        (None, None, False, None),  # worker jobs without a limit: no runway
        (3600.0, None, True, None),  # the run's workers have no end: no grid describes it
    ],
)
def test_plan_runway(
    limit: float | None, run_left: float | None, run_workers: bool, expected: Runway | None
) -> None:
    assert plan_runway(limit, run_left, run_workers, 120.0, 30.0) == expected


def test_no_landing_margin_no_runway_and_no_margins() -> None:
    assert plan_runway(3600.0, None, False, 0.0, 30.0) is None
    assert scaled_margins(NOW + 3600, NOW, 0.0, 30.0) == (0.0, 0.0)
