"""What a job's info record costs Snakemake's process (issue 31): ``Job.log_info`` per job,
Snakemake's own against the plugin's ``shellcmd_once`` fix (snakemake_internals/jobs.py).

    .venv/bin/python benchmarks/log_info.py [--jobs 2000] [--passes 5]

Builds the DAG of N thin rules (``echo {wildcards.i} > {output}``, the shape of
benchmarks/workloads.py) with Snakemake's API in a temporary directory, sends Snakemake's
log handlers to /dev/null (so the figure is Snakemake's work, not a terminal's), and runs
every job's ``log_info()`` once per pass with Snakemake's functions and once with the fix,
alternating. Prints the process CPU per job of each pass and the medians. Asserts nothing;
exits 0 whatever the figures are.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

SNAKEFILE = """\
rule all:
    input: expand("out/{{i}}.txt", i=range({n}))
rule thin:
    output: "out/{{i}}.txt"
    shell: "echo {{wildcards.i}} > {{output}}"
"""


def thin_jobs(workdir: Path, n: int, api: Any) -> list[Any]:
    from snakemake.settings.types import DAGSettings, ExecutionSettings, ResourceSettings

    (workdir / "Snakefile").write_text(SNAKEFILE.format(n=n))
    workflow_api = api.workflow(
        resource_settings=ResourceSettings(cores=1),
        snakefile=workdir / "Snakefile",
        workdir=workdir,
    )
    workflow_api.dag(DAGSettings())
    workflow = workflow_api._workflow
    workflow._prepare_dag(forceall=False, ignore_incomplete=True, lock_warn_only=True)
    workflow._build_dag()
    workflow.execution_settings = ExecutionSettings()
    workflow.dag.update_priority()  # as the DAG's postprocess before a run
    return [job for job in workflow.dag.needrun_jobs() if job.rule.name == "thin"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--passes", type=int, default=5)
    args = parser.parse_args()

    import snakemake.api
    from snakemake.jobs import Job
    from snakemake.logging import logger
    from snakemake.settings.types import OutputSettings

    from snakemake_executor_plugin_dask_slurm.snakemake_internals import guard
    from snakemake_executor_plugin_dask_slurm.snakemake_internals import jobs as fixes

    ways = {
        "snakemake": (guard.original(Job.log_info), guard.original(Job.shellcmd.fget)),
    }
    ways["shellcmd_once"] = fixes.shellcmd_replacements(*ways["snakemake"])
    with (
        tempfile.TemporaryDirectory() as tmp,
        snakemake.api.SnakemakeApi(OutputSettings()) as api,
        open(os.devnull, "w") as devnull,
    ):
        os.chdir(tmp)
        jobs = thin_jobs(Path(tmp), args.jobs, api)
        for handler in logger.handlers:
            if hasattr(handler, "stream"):
                handler.stream = devnull
        per_job: dict[str, list[float]] = {way: [] for way in ways}
        for _ in range(args.passes):
            for way, (log_info, shellcmd) in ways.items():
                Job.log_info = log_info
                Job.shellcmd = property(shellcmd)
                began = time.process_time()
                for job in jobs:
                    job.log_info()
                per_job[way].append((time.process_time() - began) / len(jobs) * 1000)
    print(f"Job.log_info, CPU ms per job, {len(jobs)} thin jobs, load {os.getloadavg()[0]:.2f}:")
    for way, figures in per_job.items():
        passes = " ".join(f"{x:.3f}" for x in figures)
        print(f"  {way}: {passes}; median {statistics.median(figures):.3f}")


if __name__ == "__main__":
    main()
