"""The benchmark harness (benchmarks/run.py) in smoke mode, so that it cannot rot.

Only that it runs and reports its contenders with every output produced is checked: it is
a benchmark, and no timing is asserted. One contender of each kind (Snakemake's own
executor, the plugin with its recommended settings, the plugin's general way), not all
of them: each costs a run of Snakemake, and they differ only in their arguments.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

RUN = Path(__file__).resolve().parent.parent / "benchmarks" / "run.py"
LOCAL_CONTENDERS = ("local-greedy", "dask-local-rec")
#: Starts a Snakemake per rule, so it runs only a few rules.
GENERAL_CONTENDERS = ("dask-local-general",)
DASK_CONTENDERS = ("dask-local-rec", *GENERAL_CONTENDERS)
SMOKE_WORKLOADS = (("thin", 50), ("farm", 12))


def test_smoke_mode_reports_its_contenders(tmp_path: Path, no_leftovers: str) -> None:
    contenders = ",".join((*LOCAL_CONTENDERS, *GENERAL_CONTENDERS))
    argv = [sys.executable, str(RUN), "--smoke", "--no-plots", "--out", str(tmp_path)]
    argv += ["--contenders", contenders]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    runs = json.loads((tmp_path / "results.json").read_text())["runs"]
    assert sorted((r["workload"], r["rules"], r["contender"]) for r in runs) == sorted(
        [(kind, n, c) for kind, n in SMOKE_WORKLOADS for c in LOCAL_CONTENDERS]
        + [("thin", 3, c) for c in GENERAL_CONTENDERS]
    )
    for run in runs:
        assert run["status"] == "ok", run
        assert run["outputs_correct"] == run["outputs_expected"] == run["rules"], run
        assert run["wall_seconds"] > 0, run
        assert run["snakemake_peak_rss_mb"], run
        assert not run["leftovers"], run
        if run["contender"] in DASK_CONTENDERS:
            assert run["latency"]["submit_to_start"]["count"] == run["rules"], run
            for name in (
                "end_to_told",
                "end_to_noticed",
                "noticed_to_reporting",
                "reporting_to_told",
            ):
                assert run["latency"][name]["count"] == run["rules"], (name, run)
            assert run["latency"]["snakemake_lock_hold"]["count"] >= 1, run
            assert run["bringup_seconds"] is not None and run["teardown_seconds"] is not None
            assert run["scheduler_peak_rss_mb"], run

    table = (tmp_path / "results.md").read_text()
    for contender in LOCAL_CONTENDERS:
        assert f"| 50 | {contender} |" in table
        assert f"| 12 | {contender} |" in table
    worker_side = table.split("## Time on the worker per rule", 1)[1].split("##", 1)[0]
    for contender in GENERAL_CONTENDERS:
        assert f"| 3 | {contender} |" in worker_side
    assert "thin-50-dask-local-rec-r0: ok" in proc.stdout
