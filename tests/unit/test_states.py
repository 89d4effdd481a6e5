"""What SLURM says of a job's state, in a user's words."""

from __future__ import annotations

import pytest

from snakemake_executor_plugin_dask_slurm.slurm.states import (
    GONE,
    allocation_ended,
    parse_job_state,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "JobId=1 JobName=p JobState=CANCELLED Reason=None Dependency=(null)",
            ("CANCELLED", "None"),
        ),
        ("JobId=1 JobState=RUNNING Reason=None", ("RUNNING", "None")),
        ("JobId=1 JobState=TIMEOUT Reason=TimeLimit", ("TIMEOUT", "TimeLimit")),
        ("JobId=1 JobState=NODE_FAIL", ("NODE_FAIL", "None")),
        # A job name that looks like a field is not the field.
        ("JobId=1 JobName=xJobState=RUNNING JobState=PREEMPTED Reason=None", ("PREEMPTED", "None")),
        ("", None),
    ],
)
def test_parse_job_state(text: str, expected: tuple[str, str] | None) -> None:
    assert parse_job_state(text) == expected


@pytest.mark.parametrize(
    ("state", "fragments"),
    [
        (("CANCELLED", "None"), ["allocation 25 has ended (state CANCELLED)", "scancel"]),
        (
            ("TIMEOUT", "TimeLimit"),
            ["(state TIMEOUT, reason TimeLimit)", "time limit", "--time", "only what is missing"],
        ),
        (("NODE_FAIL", "None"), ["(state NODE_FAIL)", "nodes failed"]),
        ((GONE, "None"), ["allocation 25 has ended", "no longer lists it"]),
        # Still cleaning up its nodes: the reason tells a time-out from a cancel.
        (("COMPLETING", "None"), ["(state COMPLETING)", "most likely it was cancelled"]),
        (("COMPLETING", "TimeLimit"), ["(state COMPLETING, reason TimeLimit)", "time limit"]),
        (("COMPLETING", "NodeDown"), ["(state COMPLETING, reason NodeDown)", "nodes failed"]),
        (("WEIRD_NEW_STATE", "None"), ["(state WEIRD_NEW_STATE)", "SLURM ended it"]),
    ],
)
def test_allocation_ended_says_why(state: tuple[str, str], fragments: list[str]) -> None:
    message = allocation_ended("25", state)
    assert message is not None
    for fragment in fragments:
        assert fragment in message, message


def test_a_running_allocation_has_not_ended() -> None:
    assert allocation_ended("25", ("RUNNING", "None")) is None
