"""Whether the cluster can still run jobs, from what the plugin can see without asking
the scheduler (pure)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

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


class NoWorkers:
    """Since when no worker has been alive, and whether that ends the run: the timer
    behind :func:`no_worker_problem`, fed what the cluster looks like at each check."""

    def __init__(self, restarts: bool, startup_timeout: float, logs: str):
        self.restarts = restarts
        self.startup_timeout = startup_timeout
        self.logs = logs
        self.since: float | None = None

    def check(
        self,
        now: float,
        alive: int,
        may_come: bool,
        scheduler_lost: bool,
        deaths: Callable[[], Sequence[str]],
    ) -> str | None:
        """The run's end (the sentence saying why) when ``alive`` is 0 for long enough and
        no worker ``may_come``; ``deaths`` is asked only then. With the scheduler lost,
        the count of workers means nothing (the source says what broke)."""
        if alive or may_come or scheduler_lost:
            self.since = None
            return None
        self.since = self.since if self.since is not None else now
        return no_worker_problem(
            now - self.since, self.restarts, self.startup_timeout, deaths(), self.logs
        )
