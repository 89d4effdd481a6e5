"""Plain flags are fast: Snakemake's job-rate limit (and ILP, and no subsample) are lifted
when the user chose none of them, and a limit the user chose is honoured."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import VENV_BIN
from tests.waiting import eventually, still_running

pytestmark = pytest.mark.e2e

JOBS = 60
SNAKEFILE = (
    f'rule all:\n    input: expand("out/{{i}}.txt", i=range({JOBS}))\n'
    'rule thin:\n    output: "out/{i}.txt"\n    shell: "echo {wildcards.i} > {output}"\n'
)


def timed(tmp_path: Path, token: str, *args: str) -> tuple[float, str]:
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    env = dict(os.environ, DASK_SLURM_TEST_TOKEN=token)
    env.pop("SLURM_JOB_ID", None)
    begin = time.monotonic()
    done = subprocess.run(
        [str(VENV_BIN / "snakemake"), "--executor", "dask-slurm", *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    took = time.monotonic() - begin
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(list((tmp_path / "out").iterdir())) == JOBS
    return took, done.stdout + done.stderr


def test_plain_flags_are_not_rate_limited(tmp_path: Path, no_leftovers: str) -> None:
    took, said = timed(tmp_path, no_leftovers, "--jobs", "100")
    assert "scheduling for many short jobs: no job-rate limit" in said, said
    # before Snakemake's first job selection, not after it (snakemake_internals/scheduler.py)
    assert said.index("scheduling for many short jobs") < said.index("Select jobs to execute")
    assert "greedy job selection instead of ilp" in said
    assert "hint:" not in said, said
    # 60 jobs at Snakemake's 10/1s limit would take 6 s of waiting alone
    assert took < 30


def test_a_rate_limit_the_user_chose_is_honoured(tmp_path: Path, no_leftovers: str) -> None:
    took, said = timed(tmp_path, no_leftovers, "--jobs", "100", "--max-jobs-per-timespan", "10/1s")
    assert "no job-rate limit" not in said, said
    assert "at most 10 job submissions per second" in said  # the hint names the user's cap
    assert took > (JOBS / 10) - 1, f"{took:.1f} s: the user's 10/1s limit was not honoured"


WIDE = 12
WAITING = (
    f'rule all:\n    input: expand("out/{{i}}.txt", i=range({WIDE}))\n'
    "rule wait:\n"
    '    output: "out/{i}.txt"\n'
    '    shell: "touch started/{wildcards.i}; while [ ! -e go ]; do sleep 0.05; done; '
    'echo {wildcards.i} > {output}"\n'
)


def test_a_farm_wider_than_the_subsample_starts_before_any_job_ends(
    tmp_path: Path, no_leftovers: str
) -> None:
    """12 slots, a subsample of 4, 12 jobs that end only once all have started: Snakemake
    9.27.1 starts 4 and waits for one of them to end (it never would); the plugin's rounds
    (snakemake_internals/rounds.py) start all 12, and the run's rounds stay few."""
    (tmp_path / "Snakefile").write_text(WAITING)
    (tmp_path / "started").mkdir()
    env = dict(os.environ, DASK_SLURM_TEST_TOKEN=no_leftovers)
    env.pop("SLURM_JOB_ID", None)
    log = tmp_path / "snakemake.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(VENV_BIN / "snakemake"), "--executor", "dask-slurm", "--jobs", str(WIDE),
             "--scheduler-subsample", "4", "--dask-slurm-cpus", str(WIDE),
             "--dask-slurm-no-usage-report"],
            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        eventually(
            f"all {WIDE} jobs running at once",
            lambda: len(list((tmp_path / "started").iterdir())) == WIDE,
            timeout=60,
            check=still_running(proc, log.read_text),
        )
        (tmp_path / "go").touch()
        assert proc.wait(timeout=60) == 0, log.read_text()
    finally:
        proc.kill()
        proc.wait()
    for i in range(WIDE):
        assert (tmp_path / "out" / f"{i}.txt").read_text() == f"{i}\n"
    said = log.read_text()
    assert said.count("Select jobs to execute") <= 4, said  # three full rounds, one empty
