"""Hints for the user about settings that slow a farm of short jobs (pure)."""

from __future__ import annotations


def speed_hint(
    scheduler: str,
    jobs: int | None,
    max_jobs_per_second: float | None,
    cpus: int,
    subsample: int | None = 500,
) -> str | None:
    """A one-line hint when scheduling settings the user chose will slow a farm of short
    jobs (given the settings Snakemake runs with, after the plugin lifted its defaults)."""
    slow = []
    if scheduler == "ilp":
        slow.append("the ILP job scheduler (costly per job)")
    elif subsample is None and jobs is None:
        slow.append("the greedy job scheduler over every ready job (quadratic)")
    if jobs is not None and jobs < 4 * cpus:
        slow.append(f"--jobs {jobs} for {cpus} worker CPUs")
    if max_jobs_per_second is not None and max_jobs_per_second <= 100:
        slow.append(f"at most {max_jobs_per_second:g} job submissions per second")
    if not slow:
        return None
    return (
        f"for many short jobs this run may be slowed by {', '.join(slow)}, which you chose; "
        "left to the plugin, these suit a farm of short jobs (see the plugin's "
        'docs/further.md, "Fast thin jobs")'
    )
