"""A farm run with the plugin's fixes of Snakemake (snakemake_internals/) installed writes
what Snakemake's own local executor, without them, writes, and no empty job log."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_fidelity import both

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(240)
def test_a_farm_with_the_fixes_writes_what_snakemake_writes(
    tmp_path: Path, no_leftovers: str
) -> None:
    local, plugin, run = both(tmp_path, no_leftovers, "farm", ("--cores", "2"), ("--jobs", "100"))
    said = run.stdout + run.stderr
    assert run.returncode == 0, said
    assert "is not the code the plugin's fix was written for" not in said, said
    assert len(local) == 62 and plugin == local
    assert local["piped.txt"] == b"1\n2\n3\n4\n5\n0\n"
    # The 61 silent jobs left no log; the pipe group's own Snakemake printed, so it has one.
    logs = sorted((tmp_path / "plugin/.snakemake/dask-slurm/logs/jobs").rglob("*.log"))
    assert len(logs) == 1 and logs[0].stat().st_size > 0, logs
