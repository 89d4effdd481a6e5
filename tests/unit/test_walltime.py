"""Reading the allocation's time left from what Slurm prints (22.05 and 23.02+ forms)."""

from __future__ import annotations

import pytest

from snakemake_executor_plugin_dask_slurm.slurm.walltime import parse_duration, time_left

#: ``scontrol show job -o`` of Debian 12's Slurm 22.05.8 (the test cluster), shortened.
SCONTROL_2205 = (
    "JobId=174 JobName=interactive UserId=root(0) JobState=RUNNING Reason=None "
    "RunTime=00:01:10 TimeLimit=00:05:00 TimeMin=N/A SubmitTime=2026-11-30T23:10:00 "
    "StartTime=2026-11-30T23:10:00 EndTime=2026-11-30T23:15:00 Partition=debug"
)
#: Slurm 23.11, a job with days and no time limit.
SCONTROL_2311_DAYS = "JobId=9 JobState=RUNNING RunTime=1-02:00:00 TimeLimit=2-00:00:00 X=1"
SCONTROL_UNLIMITED = "JobId=9 JobState=RUNNING RunTime=00:00:05 TimeLimit=UNLIMITED EndTime=Unknown"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1-02:03:04", 93784.0),  # D-HH:MM:SS
        ("02:03:04", 7384.0),  # HH:MM:SS
        ("03:04", 184.0),  # MM:SS
        ("5", 300.0),  # minutes, as sbatch --time reads a bare number
        ("1-2", 93600.0),  # D-HH
        ("1-2:30", 95400.0),  # D-HH:MM
        ("0:00:00", 0.0),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["UNLIMITED", "INFINITE", "NOT_SET", "N/A", "", "x", "-1", "1-"])
def test_no_limit_or_unreadable(text: str) -> None:
    assert parse_duration(text) is None


def test_time_left_is_limit_minus_run_time() -> None:
    assert time_left(SCONTROL_2205) == 230.0
    assert time_left(SCONTROL_2311_DAYS) == 22 * 3600.0
    assert time_left(SCONTROL_UNLIMITED) is None
    assert time_left("JobId=1 JobState=RUNNING") is None
    # Past its limit (OverTimeLimit): nothing left, never negative.
    assert time_left("RunTime=00:06:00 TimeLimit=00:05:00") == 0.0
