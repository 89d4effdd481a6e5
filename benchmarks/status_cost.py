"""What the status line and file cost per job in Snakemake's process: the submit and
settle path (``JobRegistry.hand_over`` with the listeners told, ``Settler.settle`` of a
success) over a real Snakemake DAG of thin jobs, without and with the run's
``ProgressCounts`` listener; and one status round (read, figures, write) for scale.

    python benchmarks/status_cost.py --jobs 2000 --passes 7
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo

from benchmarks.log_info import thin_jobs
from snakemake_executor_plugin_dask_slurm.dispatch.ends import Settler
from snakemake_executor_plugin_dask_slurm.dispatch.listeners import Listeners
from snakemake_executor_plugin_dask_slurm.dispatch.outcomes import Finished
from snakemake_executor_plugin_dask_slurm.dispatch.progress import (
    Load,
    ProgressCounts,
    Reading,
    figures,
)
from snakemake_executor_plugin_dask_slurm.dispatch.registry import JobRecord, JobRegistry
from snakemake_executor_plugin_dask_slurm.report.status_file import write_status
from snakemake_executor_plugin_dask_slurm.worker.wire import TaskSpec


def one_pass(jobs: list[Any], listeners: Listeners) -> float:
    """CPU ms per job: every job handed over in chunks of 100, then settled as a success."""
    registry = JobRegistry()
    records = [
        JobRecord(
            SubmittedJobInfo(job, external_jobid=f"k{i}"),
            TaskSpec(f"k{i}", ("true",), ".", (), f"/l/{i}.log", None),
            {"cpus": 1.0}, "direct",
        )
        for i, job in enumerate(jobs)
    ]  # fmt: skip
    ended = [Finished(r.key, True, seconds=0.1) for r in records]
    told = SimpleNamespace(succeeded=lambda info: None)
    settler = Settler(
        registry,
        SimpleNamespace(drain=lambda: ended),
        listeners,  # type: ignore[arg-type]
        SimpleNamespace(snakemake=told),  # type: ignore[arg-type]
        SimpleNamespace(from_worker_job=lambda name: False),  # type: ignore[arg-type]
    )
    began = time.process_time()
    for at in range(0, len(records), 100):
        chunk = records[at : at + 100]
        registry.hand_over(chunk, lambda info: None, lambda specs: None)
        listeners.handed_over(chunk)
    settler.settle_finished()
    return (time.process_time() - began) / len(jobs) * 1000


def status_round(directory: Path) -> float:
    counts = ProgressCounts()
    before = Reading(0.0, 10, 2001, 40, Load(4, 64, 40))
    began = time.perf_counter()
    for _ in range(100):
        now = Reading(time.time(), 20, 2001, 40, Load(4, 64, 40))
        write_status(directory / "status.json", figures(now, before, counts, None))
    return (time.perf_counter() - began) / 100 * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--passes", type=int, default=7)
    args = parser.parse_args()
    import snakemake.api
    from snakemake.settings.types import OutputSettings

    with (
        tempfile.TemporaryDirectory() as tmp,
        snakemake.api.SnakemakeApi(OutputSettings()) as api,
    ):
        os.chdir(tmp)
        jobs = thin_jobs(Path(tmp), args.jobs, api)
        ways = {
            "without": lambda: Listeners(),
            "with ProgressCounts": lambda: Listeners([ProgressCounts()]),
        }
        per_job: dict[str, list[float]] = {way: [] for way in ways}
        for _ in range(args.passes):
            for way, make in ways.items():
                per_job[way].append(one_pass(jobs, make()))
        round_ms = status_round(Path(tmp))
    print(
        f"hand-over + settle, CPU ms per job, {len(jobs)} thin jobs, load {os.getloadavg()[0]:.2f}:"
    )
    for way, found in per_job.items():
        passes = " ".join(f"{x:.4f}" for x in found)
        print(f"  {way}: {passes}; median {statistics.median(found):.4f}")
    print(f"one status round (figures + atomic write with fsync): {round_ms:.2f} ms wall")


if __name__ == "__main__":
    main()
