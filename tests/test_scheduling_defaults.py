"""Plain flags are fast: Snakemake's job-rate limit (and ILP, and no subsample) are lifted
when the user chose none of them, and a limit the user chose is honoured."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import VENV_BIN

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
