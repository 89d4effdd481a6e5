"""Hints for the user about settings that slow a farm of short jobs (pure)."""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from typing import Any


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


def run_speed_hint(
    rate: tuple[int, float] | None, scheduler: str, subsample: int | None, nodes: Any, cpus: int
) -> str | None:
    """:func:`speed_hint` from what Snakemake runs with: its job-rate limit ``rate`` (jobs,
    seconds), job selector and subsample, and ``--jobs`` (``nodes``, sys.maxsize: none)."""
    per_second = rate[0] / rate[1] if rate and rate[1] else None
    jobs = nodes if isinstance(nodes, int) and nodes < sys.maxsize else None
    return speed_hint(scheduler, jobs, per_second, cpus, subsample)


def dashboard_hint(
    port: int,
    bound_host: str,
    here: str,
    submit_host: str | None,
    reachable_link: str,
    tunnel: bool = True,
    query: str = "",
    guarded: bool = False,
) -> str:
    """Where to open the dashboard, and the SSH tunnel a user types on a laptop to reach
    one bound to loopback on ``here`` (through ``submit_host``, the login node ``salloc``
    or ``sbatch`` ran on, when that is another host). ``tunnel`` False: the scheduler runs
    where the user runs Snakemake, outside SLURM (local mode), so the link is all there is.
    ``query`` (``?token=...``) follows every link; ``guarded``: its pages ask for a token."""
    if bound_host not in ("127.0.0.1", "localhost", "::1"):
        who = (
            ": anyone who can reach that port can ask, and plain HTTP carries the token "
            "readable across the network"
            if guarded
            else ", without a login: anyone who can reach that port can see it"
        )
        served = bound_host or "every interface"
        return f"Dask dashboard: {reachable_link}{query} (served on {served}{who})"
    if not tunnel:
        return f"Dask dashboard: http://127.0.0.1:{port}/status{query} (loopback only)"
    jump = ["-J", submit_host] if submit_host and submit_host not in (here, "localhost") else []
    ssh = " ".join(["ssh", "-N", "-L", f"{port}:127.0.0.1:{port}", *jump, here])
    return (
        f"Dask dashboard: http://127.0.0.1:{port}/status{query} on {here} (loopback only); "
        f"from your laptop run '{ssh}', then open http://localhost:{port}/status{query}"
    )


def token_note(kept: str | None, shown: bool) -> str:
    """What the dashboard's line (which goes to Snakemake's log: often readable by others)
    says of the link with the token: where its owner finds it."""
    note = "; its pages answer only with this run's token"
    if shown:
        note += ": the link with it is printed above, not in Snakemake's log file"
        return note + (f", and kept in {kept} (only you can read it)" if kept else "")
    if kept:
        return note + f": the link with it is in {kept} (only you can read it)"
    return note + ", and the file for its link could not be written (see the lines above)"


def blame_setting(said: str, settings: Mapping[str, Sequence[str]]) -> str | None:
    """When a command's complaint (``said``) names an option that one of the user's
    settings passed (``settings``: setting name -> the arguments it gave), the sentence
    saying so; None otherwise."""
    for setting, args in settings.items():
        options = {a.split("=", 1)[0] for a in args if a.startswith("-")}
        named = sorted(o for o in options if re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", said))
        if named:
            given = shlex.quote(shlex.join(args))
            return f"{', '.join(named)} came from {setting} {given}: fix or remove it there."
    return None
