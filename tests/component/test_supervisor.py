"""The supervisor's command-line entry points, run for real."""

from __future__ import annotations

import os
import subprocess
import sys


def test_supervisor_reaches_the_real_dask_worker_help() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake_executor_plugin_dask_slurm.worker.supervisor",
            "--worker-help",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, SLURMD_NODENAME="n9"),
    )
    assert done.returncode == 0, done.stderr
    assert "--nthreads" in done.stdout
    assert "RuntimeWarning" not in done.stderr
