"""Attaching with a scheduler file: only a file that may still come is waited for; every
other bad file is named at once."""

from __future__ import annotations

import time
from pathlib import Path

from snakemake_executor_plugin_dask_slurm.clusters.attach import WRITING_GRACE, file_problem


def test_a_scheduler_file_is_waited_for_only_while_it_may_still_come(tmp_path: Path) -> None:
    now = time.time()
    later = now + WRITING_GRACE + 1
    assert file_problem(tmp_path / "later.json", later) is None  # not there yet: wait
    bad = tmp_path / "bad.json"
    bad.write_text("this is { not json")
    assert file_problem(bad, now) is None  # being written, maybe
    assert file_problem(bad, later) == "it is not JSON, so not a file a Dask scheduler wrote"
    bad.write_text('{"id": 1}')
    assert file_problem(bad, later) == 'it holds no scheduler address (no "address" key)'
    bad.write_text('{"address": "tls://10.0.0.1:8786"}')
    assert file_problem(bad, later) is None
    assert file_problem(tmp_path / "nodir" / "s.json", now) == (
        f"its directory {tmp_path / 'nodir'} does not exist"
    )
