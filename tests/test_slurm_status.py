"""The status command on an sbatch run of the SLURM test cluster, asked from the submit
host (this process; the batch script runs on n3, another host, whose 8 CPUs run the 2 fast
and the 4 held jobs at once, whatever order they start in): mid-way, judged live by the
file's age (a pid on n3 cannot be checked from here), with the figures against the outputs
and held jobs that exist; then after the run ended."""

from __future__ import annotations

import socket
import time
from typing import TYPE_CHECKING

import pytest

from tests.appenders import holding, release
from tests.conftest import VENV_BIN, Workflow
from tests.test_status import figures, status
from tests.waiting import eventually

if TYPE_CHECKING:
    from tests.slurm_cluster.fixtures import SlurmTestCluster

pytestmark = [pytest.mark.slurm, pytest.mark.e2e]


def present(workflow: Workflow, name: str) -> set[str]:
    return {p.name for p in (workflow.path / name).glob("*")}


@pytest.mark.workflow("status")
def test_an_sbatch_run_asked_from_the_submit_host(
    slurm_cluster: SlurmTestCluster, workflow: Workflow
) -> None:
    with holding(workflow.path) as hold:
        script = (
            "#!/bin/bash\n"
            f"cd {workflow.path}\n"
            f"export DASK_SLURM_TEST_TOKEN={workflow.token}\n"
            f"exec {VENV_BIN / 'snakemake'} --executor dask-slurm --jobs 8 -q "
            "--dask-slurm-status-interval 2 --dask-slurm-no-usage-report "
            f"--config token={workflow.token} count=6 fast=2 {hold}\n"
        )
        job = slurm_cluster.sbatch(
            script, ["-N1", "-w", "n3", "--exclusive", f"--output={workflow.path}/job.out",
                     "--time=5"],
        )  # fmt: skip
        output = lambda: (workflow.path / "job.out").read_text()  # noqa: E731
        eventually(
            "2 outputs and 4 held jobs",
            lambda: present(workflow, "out") == {"0.txt", "1.txt"}
            and len(present(workflow, "started")) == 6,
            180, interval=0.2,
        )  # fmt: skip
        seen = time.time()
        data = eventually(
            "a status file written since, with both done",
            lambda: (d := figures(workflow)).get("updated_at", 0) > seen
            and d["jobs"]["done"] == 2 and d["jobs"]["running"] == 4 and d,
            30, interval=0.2,
        )  # fmt: skip
        assert data["host"] == "n3" != socket.gethostname(), data
        assert data["allocation"]["job_id"] == job and data["cluster"] == "srun", data
        assert data["jobs"]["total"] == 7 and data["jobs"]["waiting"] == 1, data
        assert data["workers"]["alive"] == 1 and data["workers"]["slots"] == 8, data
        code, said = status(workflow)
        assert code == 0, said + output()
        assert "live on n3 (its process cannot be checked from" in said, said
        assert f"SLURM job {job}" in said and "2 of 7 jobs done, 4 running" in said, said
        release(workflow.path)
        state, _ = slurm_cluster.wait_job(job, timeout=120)
    assert state == "COMPLETED", output()
    assert "dask-slurm: 7 of 7 jobs done" in output(), output()  # the line, under -q
    assert "the run ended: success" in output(), output()
    code, said = status(workflow)
    assert code == 0 and "the last run ended: success" in said, said
    assert figures(workflow)["jobs"]["done"] == 7
