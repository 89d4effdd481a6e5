"""Whether the cluster can still run jobs, from what the plugin can see without asking
the scheduler (pure)."""

from __future__ import annotations

from collections.abc import Sequence

#: Seconds to wait, when no worker is left, for the supervisors' word on how they died.
DEATH_RECORD_WAIT = 2.0


def no_worker_problem(
    waited: float, restarts: bool, startup_timeout: float, deaths: Sequence[str], logs: str
) -> str | None:
    """No worker has been alive for ``waited`` seconds: the end of the run (the sentence
    saying so), unless dead workers are restarted (then only after the start-up timeout),
    or their supervisors may still be writing how they died (then after a moment)."""
    if restarts:
        if waited < startup_timeout:
            return None
        return f"no Dask worker has been alive for {waited:.0f} s"
    if not deaths and waited < DEATH_RECORD_WAIT:
        return None
    return (
        f"no Dask worker is left ({'; '.join(deaths) or 'every worker died'}; nothing "
        f"restarts them: see the worker logs in {logs}; --dask-slurm-nanny restarts a "
        "worker that dies)"
    )
