"""The one SLURM command runner, against scripted SLURM tools: what it finds, asks and says."""

from __future__ import annotations

from pathlib import Path

import pytest

from snakemake_executor_plugin_dask_slurm.slurm.run import (
    SlurmCommandError,
    SlurmCommands,
    find_slurm_commands,
    scontrol_hostnames,
    scontrol_job_state,
)


def script(directory: Path, name: str, body: str) -> Path:
    path = directory / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize(
    ("tools", "expected_scontrol"),
    [(["srun", "scontrol"], True), (["srun"], False)],
)
def test_find_slurm_commands(tmp_path: Path, tools: list[str], expected_scontrol: bool) -> None:
    for tool in tools:
        script(tmp_path, tool, "exit 0")
    assert find_slurm_commands(str(tmp_path)) == SlurmCommands(
        srun=str(tmp_path / "srun"),
        scontrol=str(tmp_path / "scontrol") if expected_scontrol else None,
    )


def test_find_slurm_commands_without_srun(tmp_path: Path) -> None:
    script(tmp_path, "scontrol", "exit 0")
    with pytest.raises(SlurmCommandError) as caught:
        find_slurm_commands(str(tmp_path))
    message = str(caught.value)
    assert "'srun' is not on PATH" in message
    assert "module load slurm" in message
    assert "--dask-slurm-cluster local" in message


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            '[ "$1 $2 $3" = "show hostnames n[1-3]" ] && printf "n1\\nn2\\nn3\\n"',
            ["n1", "n2", "n3"],
        ),
        ("echo 'scontrol: error: invalid node list' >&2; exit 1", None),
        ("exit 0", None),
        ("exec sleep 30", None),
    ],
)
def test_scontrol_hostnames(tmp_path: Path, body: str, expected: list[str] | None) -> None:
    scontrol = script(tmp_path, "scontrol", body)
    assert scontrol_hostnames(str(scontrol), "n[1-3]", timeout=0.5) == expected


def test_scontrol_hostnames_missing_tool(tmp_path: Path) -> None:
    assert scontrol_hostnames(str(tmp_path / "scontrol"), "n1", timeout=5) is None


# What each answer of `scontrol show job -o 25` becomes. The real controller's answers
# are checked in tests/test_slurm_cluster.py.
@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            '[ "$*" = "show job -o 25" ] && echo "JobId=25 JobName=x JobState=TIMEOUT '
            'Reason=TimeLimit Dependency=(null)"',
            ("TIMEOUT", "TimeLimit"),
        ),
        ("echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1", ("GONE", "None")),
        ("echo 'slurm_load_jobs error: Unable to contact slurm controller' >&2; exit 1", None),
        ("echo 'JobId=25 nothing useful'", None),
        ("exec sleep 30", None),
    ],
)
def test_scontrol_job_state(tmp_path: Path, body: str, expected: tuple[str, str] | None) -> None:
    scontrol = script(tmp_path, "scontrol", body)
    assert scontrol_job_state(str(scontrol), "25", timeout=0.5) == expected


@pytest.mark.parametrize(
    ("failures", "tries", "expected"),
    [
        (2, 3, ("TIMEOUT", "TimeLimit")),  # busy twice, then the answer
        (2, 2, None),  # out of tries
        (1, 1, None),  # one try, as by default
    ],
)
def test_scontrol_job_state_asks_again_when_it_got_no_answer(
    tmp_path: Path, failures: int, tries: int, expected: tuple[str, str] | None
) -> None:
    """A controller busy ending the allocation: scontrol fails ``failures`` times (a socket
    time-out, as slurmctld under load says), then answers; each call is counted."""
    calls = tmp_path / "calls"
    scontrol = script(
        tmp_path,
        "scontrol",
        f'echo x >> {calls}; n=$(wc -l < {calls}); if [ "$n" -le {failures} ]; then '
        "echo 'slurm_load_jobs error: Socket timed out on send/recv operation' >&2; exit 1; "
        "fi; echo 'JobId=25 JobState=TIMEOUT Reason=TimeLimit'",
    )
    state = scontrol_job_state(str(scontrol), "25", timeout=5, tries=tries, pause=0.05)
    assert state == expected
    assert len(calls.read_text().splitlines()) == min(failures + 1, tries)


def test_scontrol_job_state_gives_up_within_its_time(tmp_path: Path) -> None:
    """A scontrol that hangs: three tries share the 1.5 s, each given at most 0.5 s."""
    import time

    scontrol = script(tmp_path, "scontrol", "exec sleep 30")
    began = time.monotonic()
    assert scontrol_job_state(str(scontrol), "25", timeout=1.5, tries=3, pause=0.05) is None
    assert time.monotonic() - began < 3.0


def test_run_names_the_command_its_exit_code_what_it_said_and_a_hint(tmp_path: Path) -> None:
    from snakemake_executor_plugin_dask_slurm.slurm.run import run

    sbatch = script(tmp_path, "sbatch", "echo 'sbatch: error: invalid partition' >&2; exit 1")
    with pytest.raises(SlurmCommandError) as caught:
        run([str(sbatch), "--partition", "nope"], timeout=5, hint="Check the partition.")
    assert str(caught.value) == (
        f"'{sbatch} --partition nope' failed with exit code 1. It said:\n"
        "  sbatch: error: invalid partition\nCheck the partition."
    )
    slow = script(tmp_path, "squeue", "sleep 5")
    with pytest.raises(SlurmCommandError, match=r"did not answer within 0\.2 s"):
        run([str(slow)], timeout=0.2)
    assert run([str(script(tmp_path, "ok", "echo fine"))], timeout=5) == "fine\n"
