"""The allocation's clock, decided per job (pure): where the end comes from, a job's
expected duration, whether it may start, which running jobs a landing stops."""

from __future__ import annotations

import pytest

from snakemake_executor_plugin_dask_slurm.dispatch.clock.policy import (
    MIN_SAMPLES,
    AllocationEnd,
    Durations,
    Expected,
    Running,
    clock_line,
    duration_text,
    expected_duration,
    fits,
    percentile,
    refusal_message,
    runtime_seconds,
    scaled_margins,
    to_stop_at_landing,
)
from snakemake_executor_plugin_dask_slurm.slurm.walltime import allocation_end

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("env", "left", "expected"),
    [
        # Slurm 23.02+ batch script / srun step: the variable, no call to SLURM needed.
        ({"SLURM_JOB_END_TIME": "1800003600"}, 99.0, (1800003600.0, "SLURM_JOB_END_TIME")),
        # Slurm 22.05, or an salloc shell: scontrol's TimeLimit - RunTime.
        ({}, 600.0, (NOW + 600, "scontrol show job (TimeLimit - RunTime)")),
        (
            {"SLURM_JOB_END_TIME": "0"},
            600.0,
            (NOW + 600, "scontrol show job (TimeLimit - RunTime)"),
        ),
        ({"SLURM_JOB_END_TIME": "x"}, None, None),
        ({}, None, None),  # no time limit (UNLIMITED), or scontrol did not answer
    ],
)
def test_where_the_end_comes_from(
    env: dict[str, str], left: float | None, expected: tuple[float, str] | None
) -> None:
    assert allocation_end(env, left, NOW) == expected


@pytest.mark.parametrize(
    ("values", "q", "result"),
    [
        ([5.0], 0.9, 5.0),
        ([1, 2, 3], 0.9, 3),
        ([1] * 9 + [100], 0.9, 1),
        ([1] * 8 + [50, 100], 0.9, 50),
    ],
)
def test_percentile_is_nearest_rank(values: list[float], q: float, result: float) -> None:
    assert percentile(values, q) == result


def test_a_rules_duration_is_learned_after_a_few_jobs() -> None:
    durations = Durations()
    for seconds in (18.0, 20.0):
        durations.add("farm", seconds)
    assert durations.estimate("farm") is None  # too few to trust
    durations.add("farm", 21.0)
    assert durations.estimate("farm") == (21.0, MIN_SAMPLES)
    assert durations.estimate("other") is None
    for _ in range(100):
        durations.add("farm", 20.0)
    assert durations.estimate("farm") == (20.0, 103)


@pytest.mark.parametrize(
    ("resources", "learned", "expected"),
    [
        ({"runtime": 45}, None, Expected(2700.0, "its runtime resource")),
        ({"runtime": 45}, [5.0] * 3, Expected(2700.0, "its runtime resource")),  # declared wins
        ({}, [20.0] * 4, Expected(20.0, "the 90% percentile of 4 earlier jobs")),
        ({}, [20.0] * 2, Expected(None, "unknown")),
        ({"runtime": True}, None, Expected(None, "unknown")),
        ({"runtime": 0}, None, Expected(None, "unknown")),
    ],
)
def test_expected_duration(
    resources: dict[str, object], learned: list[float] | None, expected: Expected
) -> None:
    durations = Durations()
    for seconds in learned or ():
        durations.add("r", seconds)
    assert expected_duration("r", resources, durations) == expected


def test_runtime_is_in_minutes() -> None:
    assert runtime_seconds({"runtime": 1.5}) == 90.0
    assert runtime_seconds({"mem_mb": 100}) is None


CLOCK = AllocationEnd(end=NOW + 1000, margin=120, safety=30, source="test")


@pytest.mark.parametrize(
    ("expected", "now", "ok"),
    [
        (600.0, NOW, True),  # 600 + 30 <= 880
        (850.0, NOW, True),  # exactly: 850 + 30 == 880
        (851.0, NOW, False),
        (None, NOW, True),  # unknown: may start (a risk the landing handles)
        (None, NOW + 880, False),  # at the landing point nothing starts
        (10.0, NOW + 860, False),  # 10 + 30 > 20 left
    ],
)
def test_a_job_starts_only_if_it_can_finish_before_the_landing(
    expected: float | None, now: float, ok: bool
) -> None:
    assert fits(expected, now, CLOCK.landing_at, CLOCK.safety) is ok


def test_the_refusal_says_what_it_needs_and_what_is_left() -> None:
    msg = refusal_message("rule big (jobid 3, attempt 1)", Expected(2700.0, "its runtime resource"),
                          NOW + 280, CLOCK)  # fmt: skip
    assert msg.startswith("rule big (jobid 3, attempt 1) was not started: it needs about 45 min")
    assert "(its runtime resource), but the allocation ends in 12 min" in msg
    assert "lands 2 min before that. Run again in a new allocation and Snakemake continues" in msg


def test_landing_stops_what_cannot_finish_by_the_hard_stop() -> None:
    # hard stop: 60 s before the end (half the margin)
    running = [
        Running("fits", since=NOW + 800, expected=100.0),  # ends at 900 <= 940
        Running("late", since=NOW + 800, expected=200.0),  # ends at 1000 > 940
        Running("unknown", since=NOW + 10, expected=None),
    ]
    assert to_stop_at_landing(running, CLOCK) == ["late", "unknown"]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(5, "5 s"), (89, "89 s"), (90, "2 min"), (720, "12 min"), (3900, "1 h 5 min"),
     (7200, "2 h"), (2 * 86400 + 3 * 3600, "2 d 3 h"), (-5, "0 s")],
)  # fmt: skip
def test_duration_text(seconds: float, text: str) -> None:
    assert duration_text(seconds) == text


@pytest.mark.parametrize(
    ("left", "landing", "runtime", "expected"),
    [
        (3600.0, 120.0, 30.0, (120.0, 30.0)),  # a long allocation: the margins as set
        (480.0, 120.0, 30.0, (120.0, 30.0)),  # exactly four margins left
        (120.0, 120.0, 30.0, (30.0, 7.5)),  # a short one: a quarter, both scaled
        (0.0, 120.0, 30.0, (0.0, 0.0)),  # already over
        (-5.0, 120.0, 30.0, (0.0, 0.0)),
    ],
)
def test_scaled_margins(
    left: float, landing: float, runtime: float, expected: tuple[float, float]
) -> None:
    assert scaled_margins(NOW + left, NOW, landing, runtime) == expected


def test_clock_line_names_the_end_the_landing_and_a_shortened_margin() -> None:
    end = AllocationEnd(NOW + 120, 30.0, 7.5, "SLURM_JOB_END_TIME")
    line = clock_line("25", end, NOW, 120.0)
    assert line.startswith("allocation 25 ends in 2 min, at ")
    assert "(from SLURM_JOB_END_TIME): the run lands 30 s before" in line
    assert "a quarter of the time left, less than --dask-slurm-landing-margin 120" in line
    assert "shortened" not in clock_line("25", CLOCK, NOW, 120.0)
    assert "a quarter" not in clock_line("25", CLOCK, NOW, 120.0)
    assert clock_line("25", None, NOW, 120.0) == (
        "allocation 25 has no time limit SLURM could tell: no landing point; SIGUSR1 "
        "(e.g. sbatch --signal=USR1@120) lands the run"
    )
