"""A rule's own `retries:` (issue 33): every attempt is the main Snakemake's, as with
Snakemake's local executor for the jobs it runs in its own threads — one attempt per Dask
task, with that attempt's resources, each restart told in the main output, each attempt a
row of the usage report, and a rule run at most `retries:` + 1 times."""

from __future__ import annotations

import csv
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import VENV_BIN, WORKFLOWS

pytestmark = pytest.mark.e2e

SNAKEMAKE = str(VENV_BIN / "snakemake")
PLUGIN = ("--executor", "dask-slurm", "--jobs", "4", "--dask-slurm-no-direct-shell")


def run(workdir: Path, token: str, *args: str) -> tuple[int, str]:
    done = subprocess.run(
        [SNAKEMAKE, "--keep-going", *args], cwd=workdir, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, timeout=240, stdin=subprocess.DEVNULL,
        env={**__import__("os").environ, "DASK_SLURM_TEST_TOKEN": token},
    )  # fmt: skip
    return done.returncode, done.stdout


def attempts(workdir: Path) -> list[tuple[str, str, str, str]]:
    """(rule, attempt, mem_mb, outcome) of every row of the run's jobs.tsv."""
    table = workdir / ".snakemake" / "dask-slurm" / "usage" / "latest" / "jobs.tsv"
    with table.open() as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    return sorted((r["rule"], r["attempt"], r["mem_mb"], r["outcome"]) for r in rows)


@pytest.mark.timeout(300)
def test_every_attempt_is_the_main_snakemakes_warm_and_cold(
    tmp_path: Path, no_leftovers: str
) -> None:
    ways = {"local": ("--cores", "2"), "warm": PLUGIN, "cold": (*PLUGIN, "--dask-slurm-no-warm")}
    for way, args in ways.items():
        workdir = tmp_path / way
        shutil.copytree(WORKFLOWS / "rule_retries", workdir)
        code, said = run(workdir, no_leftovers, *args)
        assert code == 1, f"{way}:\n{said}"  # `never` fails
        assert (workdir / "out" / "flaky.txt").read_text() == "ok-300\n", said
        assert (workdir / "runs-flaky.txt").read_text() == "100\n200\n300\n", said
        assert said.count("Trying to restart job") == 4, f"{way}:\n{said}"
        never = (workdir / "runs-never.txt").read_text()
        if way == "local":
            # Snakemake's local executor spawns a run: job as a Snakemake of its own,
            # which retries it again inside each attempt: 3 + 2 + 1 runs
            assert never == "10\n20\n30\n20\n30\n30\n", said
            continue
        assert never == "10\n20\n30\n", f"{way}:\n{said}"
        assert attempts(workdir) == [
            ("flaky", "1", "100", "failed"),
            ("flaky", "2", "200", "failed"),
            ("flaky", "3", "300", "done"),
            ("never", "1", "10", "failed"),
            ("never", "2", "20", "failed"),
            ("never", "3", "30", "failed"),
        ], said
